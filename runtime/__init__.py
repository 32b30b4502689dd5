"""scriptmod's runtime: array modules (``arrays``), reference kernels, interpreter, native execution."""
