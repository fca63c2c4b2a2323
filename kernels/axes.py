"""Axes shared by several kernel families, declared once (harness.axes): each family lists the
objects it reads in its Component, so one name always means one thing."""

from __future__ import annotations

from harness.axes import Axis

M_MAX = 4096

M = Axis("M", int, 32, "concurrent streams, one query token each (the batch of a decode step)",
         low=1, high=M_MAX)
