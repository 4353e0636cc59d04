"""Results: a worker's result verified, scored and recorded once; rescoring; pins; the bridge to the grading core."""
