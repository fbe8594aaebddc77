"""Run settings of the review-classifier training (imported by train.py)."""

VOCAB_SIZE = 16000
MAX_LEN = 128
HIDDEN = 128
HEADS = 4
LAYERS = 2
NUM_CLASSES = 5

BATCH_SIZE = 8
STEPS = 12
LEARNING_RATE = 3e-4
WEIGHT_DECAY = 0.01
LOG_EVERY = 4
SEED = 0

# Ported from the TPU recipe: look word vectors up as one_hot(ids) @ table.
USE_ONE_HOT_EMBEDDINGS = True
