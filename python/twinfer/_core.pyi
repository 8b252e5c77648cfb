"""Types of twinfer's C++ core (private; use the twinfer package). Generated with
pybind11-stubgen (pip install pybind11-stubgen; pybind11-stubgen twinfer._core), then
typing_extensions.CapsuleType written as typing.Any. tests/test_typing.py checks it names
every attribute the module has."""
from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['Engine', 'ExecutionContext', 'Tensor', 'build_info', 'cuda_available', 'is_engine_file', 'load_engine', 'load_model', 'read_model_info']
class Tensor:
    """
    A dense array owned by twinfer (host or device memory).
    """
    @staticmethod
    def _container(type: str, items: collections.abc.Sequence[Tensor]) -> Tensor:
        ...
    @staticmethod
    def _from_capsule(arg0: typing.Any) -> Tensor:
        ...
    def __array__(self, dtype: typing.Any = None, copy: typing.Any = None) -> typing.Any:
        ...
    def __dlpack__(self, stream: typing.Any = None, max_version: typing.Any = None, dl_device: typing.Any = None, copy: typing.Any = None) -> typing.Any:
        ...
    def __dlpack_device__(self) -> tuple[int, int]:
        ...
    def __repr__(self) -> str:
        ...
    def _items(self) -> list[Tensor]:
        """
        The items of a sequence (an optional: none or one).
        """
    def _view_as(self, dtype: str) -> Tensor:
        ...
    def numpy(self) -> typing.Any:
        """
        A NumPy view of the same memory (no copy).
        """
    @property
    def data_ptr(self) -> int:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def dtype(self) -> str:
        ...
    @property
    def nbytes(self) -> int:
        ...
    @property
    def ndim(self) -> int:
        ...
    @property
    def shape(self) -> tuple:
        ...
    @property
    def size(self) -> int:
        ...
class ExecutionContext:
    """
    Per-run state (arena, thread budget); use one per thread.
    """
    def step_times(self) -> list:
        """
        (node, op, kernel, total ms, runs) per step of the plan run last.
        """
    @property
    def arena_bytes(self) -> int:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def num_threads(self) -> int:
        ...
    @num_threads.setter
    def num_threads(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def profiling(self) -> bool:
        """
        Time every step of the runs in this context (resets the times).
        """
    @profiling.setter
    def profiling(self, arg1: bool) -> None:
        ...
class Engine:
    def create_context(self, num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> ExecutionContext:
        ...
    def kernel_report(self, arg0: list) -> list[typing.Annotated[list[str], "FixedSize(3)"]]:
        ...
    def memory_report(self, arg0: list) -> dict:
        ...
    def op_histogram(self) -> dict[str, int]:
        ...
    def run(self, inputs: collections.abc.Sequence[Tensor]) -> list[Tensor]:
        ...
    def run_in(self, context: ExecutionContext, inputs: collections.abc.Sequence[Tensor]) -> list[Tensor]:
        ...
    def save(self, path: str, metadata: collections.abc.Mapping[str, str] = {}) -> None:
        """
        Write the optimised engine to `path` (a twinfer engine file).
        """
    def stats(self) -> dict:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def inputs(self) -> list:
        ...
    @property
    def num_threads(self) -> int:
        ...
    @property
    def outputs(self) -> list:
        ...
    @property
    def precision(self) -> str:
        ...
def build_info() -> dict:
    ...
def cuda_available() -> bool:
    ...
def is_engine_file(path: str) -> bool:
    """
    True when `path` starts like a twinfer engine file.
    """
def load_engine(path: str, device: str = 'cpu', num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[Engine, dict[str, str]]:
    """
    (Engine, metadata) from a saved engine file: no load-time pass runs.
    """
def load_model(source: typing.Any, is_path: bool, device: str = 'cpu', precision: str = 'fp32', num_threads: typing.SupportsInt | typing.SupportsIndex = 0, optimize: bool = True, base_dir: str = '', extra_outputs: collections.abc.Sequence[str] = [], int8_amax: collections.abc.Mapping[str, typing.SupportsFloat | typing.SupportsIndex] = {}, keep_float: collections.abc.Set[str] = set(), int8_weights: bool = False, int8_unsigned: collections.abc.Set[str] = set(), int8_channel_mean: collections.abc.Mapping[str, collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]] = {}) -> Engine:
    ...
def read_model_info(source: typing.Any, is_path: bool, base_dir: str = '') -> dict:
    """
    Parse an ONNX model (a path, or bytes) and summarise it as a dict; nothing is compiled.
    """
