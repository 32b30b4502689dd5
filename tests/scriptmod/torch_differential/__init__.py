"""PyTorch-differential suite: the same call through torch 2.13 and scriptmod (eager, and a
traced module where that is the point). Each case is a function of the library module ``L``
(``torch`` or ``scriptmod``), so one table drives both sides; every module skips without torch."""
