// Audio worklet: the microphone's float samples (the AudioContext runs at 16 kHz) as 100 ms frames of
// signed 16-bit little-endian PCM, the format the Live API (/v1/realtime) takes, base64 in its append events.
// Runs on the audio thread.
class PcmFrames extends AudioWorkletProcessor {
  constructor() {
    super();
    this.frame = new Int16Array(sampleRate / 10);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel) {
      for (let i = 0; i < channel.length; i += 1) {
        const s = Math.max(-1, Math.min(1, channel[i]));
        this.frame[this.filled] = s < 0 ? s * 0x8000 : s * 0x7fff;
        this.filled += 1;
        if (this.filled === this.frame.length) {
          this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
          this.frame = new Int16Array(sampleRate / 10);
          this.filled = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("pcm-frames", PcmFrames);
