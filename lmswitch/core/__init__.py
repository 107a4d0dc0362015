"""The engine: model loading, the switch, the steering hook, hidden states, training, generation, transfer."""
