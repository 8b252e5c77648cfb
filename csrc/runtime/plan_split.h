// A graph whose shapes depend on input values (NonZero, NonMaxSuppression,
// a Reshape to a computed shape...) split where the values start to decide
// them: the nodes before, every shape known from the inputs' shapes, become a
// plan like any other (on the device, graphed, arena-planned), and only the
// rest goes to the host evaluator. A detector's backbone then runs at plan
// speed and its box decoding and NMS eagerly, where before the whole model
// was evaluated node by node on the host.
#pragma once
#include <vector>

#include "graph/ir.h"

namespace twinfer {

struct GraphSplit {
  // The nodes whose shapes are known, in the source's order. Inputs: the
  // graph's, all of them (plans are built for the engine's inputs' shapes);
  // outputs: the values the tail reads, and the graph's outputs they make.
  graph::Graph prefix;
  // The rest. Inputs: the engine inputs it reads (`tail_engine_inputs`,
  // their indices), then the prefix's outputs in order; outputs: the graph's.
  graph::Graph tail;
  std::vector<int> tail_engine_inputs;
};

// `g`: shapes inferred for concrete input shapes, some unknown. False when no
// node comes before the first whose shape needs values (nothing to plan).
bool split_at_value_dependence(const graph::Graph& g, GraphSplit* out);

// A sequence, optional, map or string value: host objects, which only the
// host evaluator holds (no arena can).
inline bool is_host_object(const graph::Value& v) { return dtype_is_container(v.dtype) || v.dtype == DType::kString; }

// `g` (any graph, shapes not needed) split where its first sequences, maps,
// optionals or strings are made: a classifier's scores and labels run as a
// plan, and only the ZipMap after it (a sequence of maps per row) goes to
// the host evaluator. False when nothing comes before them, or a graph
// input is one (the whole graph is then evaluated, as before).
bool split_at_host_objects(const graph::Graph& g, GraphSplit* out);

}  // namespace twinfer
