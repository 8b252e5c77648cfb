// The context's shared parts and the host path (a plan whose steps all run
// on the CPU). The device path is runtime/device_execution.cc.
#include "runtime/execution_context.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace twinfer {

ExecutionContext::ExecutionContext(Device device, int num_threads, int stream_priority, double sm_share)
    : device_(device), num_threads_(num_threads > 0 ? num_threads : 1) {
  if (sm_share > 0 && !device.is_accelerator())
    throw Error(ErrorKind::kInvalidArgument,
                "sm_share partitions a GPU's SMs; this context runs on " + device.str() + ", which has none");
  if (device.is_accelerator()) {
    api_ = &device_api(device);
    stream_ = sm_share > 0 ? api_->create_partitioned_stream(stream_priority, sm_share)
                           : api_->create_stream(stream_priority);
    // Graphs are captured on the same SMs they will run on.
    capture_stream_ = api_->create_stream_like(*stream_, stream_priority);
    done_ = api_->create_event();
    error_flag_ = api_->create_kernel_error_flag();
    alloc_done_ = api_->create_event();
    staging_done_ = api_->create_event();
  }
}

void ExecutionContext::prepare(const std::shared_ptr<const Plan>& plan) {
  if (prepared_for_ == plan) return;
  // Another plan lays the host arena out differently: a copy of the last run
  // may still read bytes this plan stages into.
  if (api_ && ran_) synchronize();
  if (!arena_ || arena_->bytes() < plan->arena_bytes) {
    // Host values of a device plan are copied to and from the device
    // asynchronously: page-locked memory. The old arena may still be read by
    // a copy in flight.
    if (api_ && arena_) synchronize();
    Allocator& a = api_ ? api_->pinned_allocator() : allocator_for(device_);
    // At least half again the old size: shapes that keep growing (longer
    // sentences, a decoder's past) reallocate, and fault fresh pages in,
    // a logarithmic number of times instead of on every new plan.
    const size_t grown = arena_ ? arena_->bytes() + arena_->bytes() / 2 : 0;
    const size_t need = std::max<size_t>(plan->arena_bytes, 64);
    try {  // the old arena stays until the new one is there (a failure leaves the context as it was)
      arena_ = Storage::allocate(a, std::max(need, grown));
    } catch (const Error&) {
      if (grown <= need) throw;
      arena_ = Storage::allocate(a, need);  // the exact size may still fit
    }
  }
  // Argument blocks carry shapes and dtypes once; each run only patches pointers.
  step_args_.assign(plan->steps.size(), KernelContext{});
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    const auto& st = plan->steps[s];
    auto& a = step_args_[s];
    for (int v : st.inputs)
      a.inputs.push_back(v < 0 ? TensorView{} : TensorView{nullptr, plan->values[v].dtype, plan->values[v].shape});
    for (int v : st.outputs)
      a.outputs.push_back(v < 0 ? TensorView{} : TensorView{nullptr, plan->values[v].dtype, plan->values[v].shape});
  }
  value_ptrs_.assign(plan->values.size(), nullptr);
  step_ms_.assign(plan->steps.size(), 0.0);
  step_runs_.assign(plan->steps.size(), 0);
  prepared_for_ = plan;
}

void ExecutionContext::set_profiling(bool on) {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  profiling_ = on;
  std::fill(step_ms_.begin(), step_ms_.end(), 0.0);
  std::fill(step_runs_.begin(), step_runs_.end(), 0);
}

std::vector<ExecutionContext::StepTime> ExecutionContext::step_times() const {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  std::vector<StepTime> r;
  if (!prepared_for_) return r;
  for (size_t s = 0; s < prepared_for_->steps.size(); ++s) {
    const auto& st = prepared_for_->steps[s];
    const std::string op = st.node->domain.empty() ? st.node->op_type : st.node->domain + "::" + st.node->op_type;
    r.push_back({st.node->name, op, st.kernel ? st.kernel->impl_name() : step_kind_name(st.kind), step_ms_[s],
                 step_runs_[s]});
  }
  return r;
}

std::vector<Tensor> ExecutionContext::execute(const std::shared_ptr<const Plan>& plan,
                                              const std::vector<Tensor>& inputs, const RunOptions& options) {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  if (plan->device.is_accelerator()) {
    if (!api_) throw Error(ErrorKind::kDevice, "a " + plan->device.str() + " plan given to a CPU context");
    return execute_device(plan, inputs, options);
  }
  prepare(plan);
  return execute_host(*plan, inputs);
}

// Runs step `index`'s kernel with its argument block on this thread and
// names the node in any error.
void ExecutionContext::run_kernel(const Plan& plan, size_t index, KernelContext& a) {
  const auto& st = plan.steps[index];
  try {
    st.kernel->run(a);
  } catch (const Error& e) {
    if (!e.node().empty() || !e.op().empty()) throw;  // named already (an unnamed node has its op)
    throw Error(e.kind(), e.what(), st.node->name, st.node->op_type);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, e.what(), st.node->name, st.node->op_type);
  }
}

// run_kernel, timed when profiling (a host kernel has finished when it returns).
void ExecutionContext::run_step(const Plan& plan, size_t index, KernelContext& a) {
  if (!profiling_) return run_kernel(plan, index, a);
  const auto t0 = std::chrono::steady_clock::now();
  run_kernel(plan, index, a);
  step_ms_[index] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++step_runs_[index];
}

std::vector<Tensor> ExecutionContext::execute_host(const Plan& plan, const std::vector<Tensor>& inputs) {
  char* arena = static_cast<char*>(arena_->data());

  // Outputs produced by kernels are written straight into fresh tensors.
  std::vector<Tensor> outputs(plan.output_shapes.size());
  for (size_t v = 0; v < plan.values.size(); ++v) {
    const auto& pv = plan.values[v];
    switch (pv.home) {
      case ValueHome::kArena: value_ptrs_[v] = arena + pv.offset; break;
      case ValueHome::kConstant: value_ptrs_[v] = pv.constant.data(); break;
      case ValueHome::kInput: value_ptrs_[v] = inputs[pv.io_index].data(); break;
      case ValueHome::kOutput:
        outputs[pv.io_index] = Tensor::empty(pv.dtype, pv.shape, device_);
        value_ptrs_[v] = outputs[pv.io_index].data();
        break;
      case ValueHome::kUnused: value_ptrs_[v] = nullptr; break;
    }
  }

  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const auto& st = plan.steps[s];
    auto& a = step_args_[s];
    for (size_t i = 0; i < st.inputs.size(); ++i) a.inputs[i].data = st.inputs[i] < 0 ? nullptr : value_ptrs_[st.inputs[i]];
    for (size_t i = 0; i < st.outputs.size(); ++i) a.outputs[i].data = st.outputs[i] < 0 ? nullptr : value_ptrs_[st.outputs[i]];
    a.scratch = arena + st.scratch_offset;
    a.num_threads = num_threads_;
    run_step(plan, s, a);
  }

  // Engine outputs that no step writes (inputs or constants passed through,
  // or a value listed twice) are copied so the caller owns what it gets.
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].defined()) continue;
    const int v = plan.graph.outputs[o];
    outputs[o] = Tensor::empty(plan.output_dtypes[o], plan.output_shapes[o], device_);
    if (outputs[o].bytes()) std::memcpy(outputs[o].data(), value_ptrs_[v], outputs[o].bytes());
  }
  return outputs;
}

}  // namespace twinfer
