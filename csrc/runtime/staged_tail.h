// A value-dependent plan's tail run on the device, stage by stage, where it
// begins with nodes whose device kernels size their own outputs
// (NonMaxSuppression on CUDA: backends/cuda/nms.cu). Those nodes run alone,
// each reading its count back (one wait), and what follows them, its input
// shapes now known, is a graph of its own: an engine (Engine::create_stage)
// whose plans are built for those shapes like any other, split again at the
// next value-dependent node. A detector's NMS and the gathers of the kept
// boxes then stay on the device, where before the whole tail went to the
// host evaluator (runtime/plan_split.h).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "graph/ir.h"
#include "ops/kernel.h"
#include "runtime/placement.h"

namespace twinfer {

class Engine;

struct StagedTail {
  // The tail as Plan::tail: inputs the engine inputs it reads, then the prefix's outputs.
  graph::Graph tail;
  struct Step {
    int node = -1;  // in tail.nodes
    std::shared_ptr<const Kernel> kernel;  // dynamic_outputs(); the CPU's on the simulated device
    // The node's constant inputs on the device (by input index; undefined
    // for the others): a device kernel never reads host memory.
    std::vector<Tensor> constants;
  };
  std::vector<Step> eager;  // the tail's first nodes, in order
  // The tail less those nodes; its inputs the values it reads (named as in
  // `tail`), its outputs the graph outputs it makes. No nodes: none.
  graph::Graph rest;

  // The rest's engine, made on the first run (Engine::create_stage), and the
  // input shapes of its latest run (what kernel_report shows).
  mutable std::mutex mutex;
  mutable std::shared_ptr<const Engine> rest_engine;
  mutable std::vector<Shape> last_rest_shapes;
};

// `tail` staged for `device`: null, with *why, unless each of its first nodes
// (those reading only its inputs and constants) has a kernel on the device
// (`placement`'s) that sizes its own outputs.
std::shared_ptr<StagedTail> stage_tail(const graph::Graph& tail, int64_t opset, Device device, Backend placement,
                                       Precision precision, std::string* why);

// Runs the stage's eager steps (inputs[i]: step i's inputs, null where
// absent or a constant, which the step holds on the device) on `stream`,
// one of the context's own (their outputs are allocated and freed in its
// order); returns each step's outputs, new device tensors with a ready
// event. On a GPU, where every kernel comes in two halves (Kernel::count /
// finish), their counts are read back once for the whole stage; otherwise
// each step reads its own (run_dynamic). The inputs must stay alive until the stream has passed the
// stage (a kernel may read them after its count): the caller waits for the
// stream once after it. On the simulated device each CPU kernel runs as a
// task of the stream, its outputs copied to the device.
std::vector<std::vector<Tensor>> run_eager_stage(const StagedTail& staged,
                                                 const std::vector<std::vector<const Tensor*>>& inputs,
                                                 const std::shared_ptr<Stream>& stream, int num_threads);

}  // namespace twinfer
