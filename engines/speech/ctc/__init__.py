"""CTC speech models (sherpa-onnx ONNX, Hugging Face *ForCTC checkpoints): one speech-model family."""
