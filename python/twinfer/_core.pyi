"""Types of twinfer's C++ core (private; use the twinfer package). Generated with
pybind11-stubgen (pip install pybind11-stubgen; pybind11-stubgen twinfer._core), then
typing.Any written as typing.Any. tests/test_typing.py checks it names
every attribute the module has."""
from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['Engine', 'Event', 'ExecutionContext', 'Graph', 'GroupGraph', 'PipelinedGraph', 'Stream', 'Tensor', 'build_info', 'build_info_cuda_compiled', 'create_event', 'create_stream', 'cuda_available', 'cuda_symbol_problems', 'device_sm_count', 'device_synchronize', 'elapsed_ms', 'injected_faults', 'is_engine_file', 'kernel_trace_clock_ns', 'load_engine', 'load_model', 'parse_device', 'read_model_info', 'set_cuda_library_path', 'set_injected_faults', 'set_sim_config', 'sim_config', 'smoothing_weight_amax', 'start_kernel_trace', 'stop_kernel_trace', 'stream_priority_range']
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
    @staticmethod
    def _from_strings(values: collections.abc.Sequence, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> Tensor:
        """
        A string tensor from a flat sequence of str/bytes (row-major) and its shape.
        """
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
        The items of a sequence (an optional: none or one; a map: its keys and its values).
        """
    def _mark_ready_on(self, stream: ...) -> None:
        """
        Marks the tensor ready at the point `stream` has reached now: an array a framework exported for that stream (DLPack), which runs on other streams then wait for.
        """
    def _view_as(self, dtype: str) -> Tensor:
        ...
    def _window(self, byte_offset: typing.SupportsInt | typing.SupportsIndex, dtype: str, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> Tensor:
        """
        A tensor over the same memory (no copy), starting byte_offset bytes after this one's start, of another dtype and shape that must fit inside the storage; it is ready when this tensor is. For tests of inputs that are not at the arena's alignment.
        """
    def cpu(self) -> Tensor:
        """
        The tensor on the host (itself if it is there already; a device tensor is waited for and copied).
        """
    def numpy(self) -> typing.Any:
        """
        A NumPy view of the same memory (no copy) for a host tensor; for a device tensor a host copy, made once the device has written it.
        """
    def synchronize(self) -> None:
        """
        Block until a device tensor has been written (raises the error of a failed run).
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
    def ready(self) -> bool:
        """
        False while the device is still writing this tensor.
        """
    @property
    def shape(self) -> tuple:
        ...
    @property
    def size(self) -> int:
        ...
class Graph:
    """
    A stream's captured work (Stream.end_capture), replayed by launch().
    """
    def launch(self, stream: Stream) -> None:
        """
        Enqueue the captured work on `stream`.
        """
    @property
    def num_nodes(self) -> int:
        ...
class Event:
    """
    A point in a stream's work (create_event; Stream.record / wait).
    """
    def synchronize(self) -> None:
        """
        Block until the recorded point is reached.
        """
    @property
    def captured(self) -> bool:
        """
        Last recorded inside a graph capture.
        """
    @property
    def ready(self) -> bool:
        ...
    @property
    def timed(self) -> bool:
        ...
class Stream:
    """
    A device stream (twinfer's own or a caller's).
    """
    def __repr__(self) -> str:
        ...
    def begin_capture(self) -> None:
        """
        Record this thread's work on the stream instead of running it (CUDA graph capture, thread-local mode). Engine runs on the stream during a capture allocate nothing: warm each context up first.
        """
    def end_capture(self) -> Graph:
        """
        End the capture: the recorded work as a Graph.
        """
    def record(self, event: Event) -> None:
        """
        Record `event` here: it marks the work enqueued so far.
        """
    def synchronize(self) -> None:
        """
        Block until the work enqueued so far has finished (raises a device task's error).
        """
    def wait(self, event: Event) -> None:
        """
        Later work on this stream waits for `event`.
        """
    def wait_for(self, tensor: Tensor) -> None:
        """
        Later work on this stream waits until a device tensor has been written.
        """
    @property
    def capturing(self) -> bool:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def handle(self) -> int:
        """
        cudaStream_t as an int (what run(stream=...) and DLPack take); an id on 'sim'.
        """
    @property
    def priority(self) -> int:
        ...
    @property
    def sm_count(self) -> int:
        """
        SMs its kernels may use: 0 for the whole device, else its green context's.
        """
    @property
    def trace_key(self) -> int:
        """
        What stop_kernel_trace names this stream's kernels with (0 where unknown).
        """
class ExecutionContext:
    """
    Per-run state (arena, thread budget); use one per thread.
    """
    def graph_stats(self) -> dict:
        """
        CUDA graphs of this context: captures, replays, graphs held.
        """
    def step_times(self) -> list:
        """
        (node, op, kernel, total ms, runs) per step of the plan run last.
        """
    def synchronize(self) -> None:
        """
        Block until this context's last run has finished on the device.
        """
    @property
    def arena_bytes(self) -> int:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def device_arena_bytes(self) -> int:
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
    @property
    def sm_count(self) -> int:
        """
        SMs its stream may use: 0 for the whole device (or the CPU), else its partition's.
        """
    @property
    def stream(self) -> Stream:
        """
        The context's own stream (None on the CPU).
        """
class Engine:
    def _run_feeds(self, feeds: typing.Any, input_names: typing.Any, output_names: typing.Any, context: typing.Any = None, outputs: typing.Any = 'auto') -> typing.Any:
        """
        Engine.run's fast path: {name: NumPy array or Tensor} in input_names' order, outputs as a dict by output_names (a list when None); None when the general path must convert the feeds.
        """
    def _test_step_inputs(self, arg0: list) -> list:
        ...
    def _wait_plans_ahead(self) -> None:
        """
        Until no plan is being built ahead of a run (tests).
        """
    def create_context(self, num_threads: typing.SupportsInt | typing.SupportsIndex = 0, priority: typing.Any = None, sm_share: typing.Any = None) -> ExecutionContext:
        ...
    def kernel_report(self, arg0: list) -> list:
        ...
    def kernel_report_for(self, arg0: collections.abc.Sequence[Tensor]) -> list:
        ...
    def memory_report(self, arg0: list) -> dict:
        ...
    def op_histogram(self) -> dict[str, int]:
        ...
    def run(self, inputs: collections.abc.Sequence[Tensor], stream: typing.Any = None, host_outputs: bool = False) -> list[Tensor]:
        ...
    def run_in(self, context: ExecutionContext, inputs: collections.abc.Sequence[Tensor], stream: typing.Any = None, host_outputs: bool = False) -> list[Tensor]:
        ...
    def save(self, path: str, metadata: collections.abc.Mapping[str, str] = {}) -> None:
        """
        Write the optimised engine to `path` (a twinfer engine file).
        """
    def stats(self) -> dict:
        ...
    @property
    def _input_defaults(self) -> dict:
        ...
    @property
    def _rank_unknown(self) -> list[str]:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def folded_overridable(self) -> list:
        ...
    @property
    def host_fallback_reason(self) -> str:
        """
        Why a device engine ran a plan through the host evaluator ('' if it never did).
        """
    @property
    def inputs(self) -> list:
        ...
    @property
    def num_threads(self) -> int:
        ...
    @property
    def options(self) -> dict:
        ...
    @property
    def outputs(self) -> list:
        ...
    @property
    def precision(self) -> str:
        ...
class GroupGraph:
    """
    Engines' runs captured as one graph across their contexts' streams (Parallel/Pipeline).
    """
    def __init__(self, members: collections.abc.Sequence[tuple[Engine, ExecutionContext, collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]]]], num_inputs: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        members: (engine, context, [(source member or -1, index) per input]).
        """
    def run(self, inputs: collections.abc.Sequence[Tensor], host_outputs: bool = False) -> list[list[Tensor]]:
        ...
    def stats(self) -> dict:
        ...
    @property
    def device(self) -> str:
        ...
    @property
    def stream(self) -> Stream:
        """
        The group's stream: graphs launch there; inputs are read in its order.
        """
class PipelinedGraph:
    """
    A Pipeline's stages captured so that one launch runs stage s of item j - s (GraphedPipeline.map).
    """
    def __init__(self, stages: collections.abc.Sequence[tuple[Engine, ExecutionContext, collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]]]], num_inputs: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        stages: (engine, context, [(source stage or -1, index) per input]).
        """
    def drain(self) -> list[list[Tensor]]:
        """
        Finishes every item in flight; their outputs, oldest first.
        """
    def push(self, inputs: collections.abc.Sequence[Tensor], host_outputs: bool = False) -> list[list[Tensor]]:
        """
        One item in; the last stage's outputs of the items finished meanwhile, oldest first.
        """
    def reset(self) -> None:
        """
        Forgets the items in flight (after the launched work is done).
        """
    def stats(self) -> dict:
        ...
    def take_finished(self) -> list[list[Tensor]]:
        """
        After push or drain raised: the outputs of the items finished before the error.
        """
    @property
    def device(self) -> str:
        ...
    @property
    def stream(self) -> Stream:
        """
        The pipeline's stream: graphs launch there; inputs are read in its order.
        """
def _map_as_dict(map: Tensor) -> typing.Any:
    """
    A map tensor as a dict of Python scalars; None where its types need NumPy.
    """
def _maps_as_dicts(sequence: Tensor) -> typing.Any:
    """
    A sequence of maps as a list of dicts; None where a map's types need NumPy.
    """
def _test_activation(arg0: str, arg1: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg2: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> list[float]:
    ...
def _test_broadcast_offsets(arg0: collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg2: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> tuple[int, list[list[int]]]:
    ...
def _test_colmajor_gemm(arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex, arg2: typing.SupportsInt | typing.SupportsIndex, arg3: bool, arg4: bool) -> tuple[int, int, int, tuple[bool, int, int, int], tuple[bool, int, int, int], int]:
    ...
def _test_conv_epilogue_channels(arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex, arg2: typing.SupportsInt | typing.SupportsIndex, arg3: bool) -> list[int]:
    ...
def _test_conv_geometry(x: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], y: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], window: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], group: typing.SupportsInt | typing.SupportsIndex, x_last: bool, y_last: bool, g: typing.SupportsInt | typing.SupportsIndex, bits32: bool = False, taps_last: bool = False, rows: bool = False) -> tuple[list[list[int]], list[list[int]]]:
    ...
def _test_conv_input_pad(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg2: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg3: bool, arg4: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
    ...
def _test_cudnn_conv_validate(x: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], w: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], y: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], pads: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], strides: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], dilations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], dtype: str) -> str:
    """
    cuDNN frontend's checks of a convolution graph, run without a GPU: '' or why.
    """
def _test_cudnn_sdpa_validate(dims: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], dtype: str, causal: bool, bias_dims: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], sm_version: typing.SupportsInt | typing.SupportsIndex, strides: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = []) -> str:
    """
    cuDNN frontend's checks of a fused-attention graph for a GPU of sm_version, run without one: '' or why.
    """
def _test_floats_to_halves_soft(arg0: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> list[int]:
    ...
def _test_halves_to_floats_soft(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[float]:
    ...
def _test_fast_divmod(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[tuple[int, int]]:
    ...
def _test_launch_configs(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[tuple[int, int, int]]:
    ...
def _test_depthwise_nhwc(arg0: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg2: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg3: typing.SupportsInt | typing.SupportsIndex, arg4: typing.SupportsInt | typing.SupportsIndex, arg5: typing.SupportsInt | typing.SupportsIndex, arg6: typing.SupportsInt | typing.SupportsIndex, arg7: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg8: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg9: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg10: typing.SupportsInt | typing.SupportsIndex) -> list[float]:
    ...
def _test_pool_index(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg2: bool) -> tuple[list[list[int]], int]:
    ...
def _test_qbinary(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg2: typing.SupportsFloat | typing.SupportsIndex, arg3: typing.SupportsInt | typing.SupportsIndex, arg4: typing.SupportsFloat | typing.SupportsIndex, arg5: typing.SupportsInt | typing.SupportsIndex, arg6: typing.SupportsFloat | typing.SupportsIndex, arg7: typing.SupportsInt | typing.SupportsIndex, arg8: bool, arg9: bool, arg10: bool) -> list[int]:
    ...
def _test_qlinear_epilogue(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: typing.SupportsInt | typing.SupportsIndex, arg2: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg3: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg4: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg5: typing.SupportsInt | typing.SupportsIndex, arg6: str, arg7: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg8: typing.SupportsFloat | typing.SupportsIndex, arg9: typing.SupportsInt | typing.SupportsIndex, arg10: bool) -> list[float]:
    ...
def _test_reduce_block(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> typing.Any:
    ...
def _test_reduce_gather(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> typing.Any:
    ...
def _test_source_batch(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[int]:
    ...
def _test_shared_packed_weights() -> tuple[int, int]:
    ...
def _test_weights_taps_last(arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], arg1: typing.SupportsInt | typing.SupportsIndex, arg2: typing.SupportsInt | typing.SupportsIndex, arg3: typing.SupportsInt | typing.SupportsIndex, arg4: typing.SupportsInt | typing.SupportsIndex, arg5: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
    ...
def build_info() -> dict:
    ...
def build_info_cuda_compiled() -> bool:
    """
    Whether this build has the CUDA backend (no driver call).
    """
def create_event(device: str, timing: bool = False) -> Event:
    ...
def create_stream(device: str, priority: typing.SupportsInt | typing.SupportsIndex = 0) -> Stream:
    ...
def cuda_available() -> bool:
    ...
def cuda_symbol_problems() -> list[str]:
    """
    Resolve every cuBLASLt / cuDNN entry point the CUDA kernels use (no GPU needed): problems found.
    """
def device_sm_count(device: str) -> int:
    """
    SMs of the whole device (the simulated device reports an H100's 132).
    """
def device_synchronize(device: str) -> None:
    ...
def elapsed_ms(device: str, start: Event, end: Event) -> float:
    """
    Milliseconds between two timing events (both reached), on any streams of the device.
    """
def injected_faults() -> list[str]:
    ...
def is_engine_file(path: str) -> bool:
    """
    True when `path` starts like a twinfer engine file.
    """
def kernel_trace_clock_ns(device: str) -> int:
    """
    The trace clock now (the spans' time base), in ns.
    """
def load_engine(path: str, device: str = 'cpu', num_threads: typing.SupportsInt | typing.SupportsIndex = 0, allow_cpu_fallback: bool = True, cuda_graphs: bool = True, stream_priority: typing.SupportsInt | typing.SupportsIndex = 0, sim_coverage: str = 'all') -> tuple[Engine, dict[str, str]]:
    """
    (Engine, metadata) from a saved engine file: no load-time pass runs.
    """
def load_model(source: typing.Any, is_path: bool, device: str = 'cpu', precision: str = 'fp32', num_threads: typing.SupportsInt | typing.SupportsIndex = 0, optimize: bool = True, base_dir: str = '', extra_outputs: collections.abc.Sequence[str] = [], int8_amax: collections.abc.Mapping[str, typing.SupportsFloat | typing.SupportsIndex] = {}, keep_float: collections.abc.Set[str] = set(), int8_weights: bool = False, int8_unsigned: collections.abc.Set[str] = set(), int8_channel_mean: collections.abc.Mapping[str, collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]] = {}, allow_cpu_fallback: bool = True, cuda_graphs: bool = True, stream_priority: typing.SupportsInt | typing.SupportsIndex = 0, sim_coverage: str = 'all', int8_smoothing: collections.abc.Mapping[str, tuple[collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], typing.SupportsFloat | typing.SupportsIndex]] = {}, int8_per_token: collections.abc.Set[str] = set(), max_cached_plans: typing.SupportsInt | typing.SupportsIndex = 16, plan_ahead: bool = True, override_initializers: collections.abc.Sequence[str] = [], override_all_initializers: bool = False) -> Engine:
    ...
def parse_device(device: str) -> str:
    ...
def host_bytes_available() -> int:
    """
    Host memory a large allocation is checked against (MemAvailable + SwapFree, capped by the cgroup).
    """
def read_model_info(source: typing.Any, is_path: bool, base_dir: str = '') -> dict:
    """
    Parse an ONNX model (a path, or bytes) and summarise it as a dict; nothing is compiled.
    """
def set_cuda_library_path(name: str, path: str) -> None:
    """
    Where cuBLASLt / cuDNN are (twinfer/_libs.py finds NVIDIA's wheels); opened on first use.
    """
def set_injected_faults(names: collections.abc.Sequence[str]) -> None:
    ...
def set_sim_config(max_delay_us: typing.SupportsInt | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex, check_order: bool, memory_limit: typing.SupportsInt | typing.SupportsIndex, compute_capability: typing.SupportsInt | typing.SupportsIndex = 90) -> None:
    ...
def sim_config() -> dict:
    ...
def smoothing_weight_amax(source: typing.Any, is_path: bool, base_dir: str = '', keep_float: collections.abc.Set[str] = set()) -> dict[str, list[float]]:
    """
    {activation: per contraction row, the largest |weight| over the MatMul/Gemm layers that read it (the layers int8 smoothing rescales)}.
    """
def start_kernel_trace(device: str) -> None:
    """
    Collect every kernel's span on the device (CUPTI on CUDA); DeviceError where it cannot.
    """
def stop_kernel_trace(device: str) -> list:
    """
    Stop tracing: [(kernel name, stream key, start ns, end ns)] of the finished kernels.
    """
def stream_priority_range(device: str) -> tuple[int, int]:
    """
    (least, greatest): numerically lower is more urgent.
    """
