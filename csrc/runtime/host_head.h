// A graph that takes strings (or sequences, maps) as inputs: a scikit-learn
// pipeline whose categorical columns come in as strings, one-hot encoded
// before a forest. Its plan could only be the host evaluator's, which built
// every kernel again on every run (the forest's included: 4.9 ms a one-row
// call where onnxruntime took 0.014 ms). Split instead: the head, the nodes
// that read those inputs (and what reads what they make of them while it is
// still a host object), is evaluated on every run; the rest, which reads only
// plain tensors, is an engine of its own (Engine::create_stage), planned per
// shape like any other, its ZipMap still split off its own plan
// (runtime/plan_split.h). CPU engines only.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "graph/ir.h"

namespace twinfer {

class Engine;

struct HostHead {
  // Inputs: the engine inputs it reads (head_engine_inputs: their indices);
  // outputs: what the rest reads from it, then the graph outputs it makes.
  graph::Graph head;
  std::vector<int> head_engine_inputs;
  // Inputs: the engine inputs it reads, then the head's values it reads
  // (fed by name); outputs: the graph outputs it makes.
  graph::Graph rest;

  // The rest's engine, made on the first run.
  mutable std::mutex mutex;
  mutable std::shared_ptr<const Engine> rest_engine;
};

// g (the engine's optimised graph) split as above, or null: no input is a
// host object, a node of the head reads something the rest makes, or one
// of the two parts would be empty.
std::unique_ptr<HostHead> split_host_head(const graph::Graph& g);

}  // namespace twinfer
