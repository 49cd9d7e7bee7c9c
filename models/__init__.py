"""Models: features, the failure predictor, straggler detection and prediction, evaluation."""
