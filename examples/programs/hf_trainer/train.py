"""Fine-tune a small BERT classifier with the Hugging Face `Trainer`.

All options come from the command line through `HfArgumentParser`, the way the
transformers example scripts do it: `TrainingArguments` plus a small dataclass of model and
data options. The dataset is synthetic (token ids whose label depends on the tokens) and
the model is built from a config (random weights, nothing downloaded, dropout off).

`--optim` picks the AdamW implementation. `adamw_torch` is `torch.optim.AdamW` with its
default for-loop implementation on CPU (a chain of elementwise kernels per parameter, each
a full pass over the weights); `adamw_torch_fused` is `AdamW(fused=True)`, one fused pass
per parameter. The 30k-token embedding table makes the update a large share of the step.
source: huggingface/transformers#22141 (Trainer: use fused torch AdamW); pytorch/pytorch#108491 (fused AdamW on CPU)
"""

from dataclasses import dataclass, field

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)


@dataclass
class ModelArguments:
    num_layers: int = field(default=4)
    hidden_size: int = field(default=128)
    vocab_size: int = field(default=30522)
    seq_len: int = field(default=32)
    num_labels: int = field(default=2)
    train_size: int = field(default=512)


class SyntheticClassification(torch.utils.data.Dataset):
    def __init__(self, size, seq_len, vocab_size, num_labels, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, vocab_size, (size, seq_len), generator=g)
        self.labels = self.ids[:, :4].sum(dim=1) % num_labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)

    config = BertConfig(
        vocab_size=model_args.vocab_size,
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_layers,
        num_attention_heads=4,
        intermediate_size=4 * model_args.hidden_size,
        max_position_embeddings=model_args.seq_len,
        num_labels=model_args.num_labels,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config)

    train_ds = SyntheticClassification(
        model_args.train_size,
        model_args.seq_len,
        model_args.vocab_size,
        model_args.num_labels,
        seed=0,
    )
    eval_ds = SyntheticClassification(
        64, model_args.seq_len, model_args.vocab_size, model_args.num_labels, seed=1
    )

    trainer = Trainer(model=model, args=training_args, train_dataset=train_ds, eval_dataset=eval_ds)
    result = trainer.train()
    print(f"train loss {result.training_loss:.4f}")
    metrics = trainer.evaluate()
    print(f"eval loss {metrics['eval_loss']:.4f}")


if __name__ == "__main__":
    main()
