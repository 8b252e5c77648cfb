"""INT8 quantization: calibration (activation ranges from sample data, three
calibrators, saved to JSON and reused), the per-layer accuracy report with
its float fallback, and (through twinfer.load(precision="int8", ...)) the
int8 engine.

>>> cal = twinfer.quantize.calibrate("model.onnx", samples, calibrator="percentile", percentile=99.99)
>>> report = twinfer.quantize.analyze("model.onnx", samples, accuracy_target=0.999)
"""

from .analyze import LayerReport, QuantReport, analyze
from .calibration import CALIBRATORS, Calibration, calibrate, quantizable_activations
from .observers import HistogramObserver, MinMaxObserver

__all__ = ["analyze", "LayerReport", "QuantReport", "CALIBRATORS", "Calibration", "calibrate", "quantizable_activations", "HistogramObserver",
           "MinMaxObserver"]
