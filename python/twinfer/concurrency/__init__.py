"""Several models at once: ``Parallel`` (engines side by side, each in its own
execution context) and ``Pipeline`` (engines and host functions in a chain,
items overlapping), with ``profile()`` reports and Gantt charts.

>>> par = twinfer.Parallel([engine_a, engine_b])
>>> out_a, out_b = par.run([{"x": a}, {"x": b}])
>>> pipe = twinfer.Pipeline([detector, crop, classifier])
>>> results = list(pipe.map(items))
>>> g = pipe.graphed()                        # on a GPU: every stage in one graph launch
"""

from .graphed import GraphedParallel, GraphedPipeline
from .parallel import Parallel
from .pipeline import Pipeline
from .profile import Profile

__all__ = ["GraphedParallel", "GraphedPipeline", "Parallel", "Pipeline", "Profile"]
