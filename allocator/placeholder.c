/* Removed once the pool lands. */ int pt_alloc_placeholder_;
