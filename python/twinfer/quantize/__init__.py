"""INT8 quantization. Today: calibration (activation ranges from sample data,
three calibrators, saved with the engine or to a file). The INT8 engine that
uses them (QDQ insertion and int8 kernels) builds on this.

>>> cal = twinfer.quantize.calibrate("model.onnx", samples, calibrator="percentile", percentile=99.99)
"""

from .calibration import CALIBRATORS, Calibration, calibrate, quantizable_activations
from .observers import HistogramObserver, MinMaxObserver

__all__ = ["CALIBRATORS", "Calibration", "calibrate", "quantizable_activations", "HistogramObserver",
           "MinMaxObserver"]
