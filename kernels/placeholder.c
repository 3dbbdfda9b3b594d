/* Removed once the kernels land. */ int pt_kernels_placeholder_;
