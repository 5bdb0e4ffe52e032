"""ONNX Runtime: one ``InferenceSession`` per segment, ORT_ENABLE_ALL, idle threads that do not spin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from rlcompile.backends.ort import create_session, session_options
from rlcompile.layer.libraries.base import Library, Runner
from rlcompile.threads import ort_session_config


def quiet_session_options(threads: int, exclusive: bool = False):
    """ORT_ENABLE_ALL with ``threads`` intra-op threads that stop spinning when a run is over (unless exclusive)."""
    options = session_options("all", threads)
    for key, value in ({} if exclusive else ort_session_config()).items():
        options.add_session_config_entry(key, value)
    return options


class OrtRunner(Runner):
    def __init__(self, session) -> None:
        self.session = session
        self.names = [value.name for value in session.get_inputs()]

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, dict(zip(self.names, inputs, strict=True)))

    def run_named(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        if names == self.names and len(feeds) == len(names):
            return self.session.run(None, feeds)  # the caller's mapping as it is, as a native user calls ORT
        return super().run_named(names, feeds)


class OrtLibrary(Library):
    name = "ort"

    def compile(self, segment: onnx.ModelProto, threads: int, exclusive: bool = False) -> Runner:
        options = quiet_session_options(threads, exclusive)
        return OrtRunner(create_session(segment.SerializeToString(), options, segment.graph.name or "segment"))
