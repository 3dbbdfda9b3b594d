/* Removed once the hooks land. */ int pt_hooks_placeholder_;
