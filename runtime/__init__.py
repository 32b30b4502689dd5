"""scriptmod's runtime: array backends, reference kernels, interpreter, native execution."""
