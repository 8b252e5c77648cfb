// The copy nodes placement inserts where a value crosses between host and
// device memory (runtime/placement.h). They have a shape rule (the input's)
// so reports and re-inference see them like any node; the executor runs
// them as stream-ordered copies, so they have no kernel.
#include "graph/domains.h"
#include "ops/schema.h"

namespace twinfer {

TWINFER_REGISTER_SCHEMA("MemcpyToDevice", infer_same_as_input0, kTwinferDomain);
TWINFER_REGISTER_SCHEMA("MemcpyToHost", infer_same_as_input0, kTwinferDomain);

}  // namespace twinfer
