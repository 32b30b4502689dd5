"""The torch_db tests need torch and its internal test databases (``expecttest``)."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")
