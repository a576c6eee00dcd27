"""What it takes to test a tuner without NNI's processes or a GPU: a driver that makes the calls
NNI 3.0's dispatcher makes (``dispatch``), and synthetic tiled-MatMul landscapes with the
structure the OpEvo paper assumes (``landscapes``). The tests and the benchmark harness use both."""
