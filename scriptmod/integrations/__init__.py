"""Bridges from compiled archives to the engines users already run them on.

Each integration is a submodule with its own optional extra, imported on its own
(``scriptmod.integrations.ray``: ``pip install scriptmod[ray]``); ``import scriptmod`` and
this package load none of them.
"""
