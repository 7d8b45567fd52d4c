"""A Hugging Face ``Trainer`` script, as a team would have it: a tiny GPT-2 language model
trained with the real ``Trainer``; nothing of hpsearch in it. ``space.yaml`` next to this
file sweeps it unmodified, reading the Trainer's own printed evaluations.

Nothing is downloaded: the text is generated here, the tokenizer is trained on it with
``tokenizers``, and the model is built from a ``GPT2Config`` (``--config_overrides``, as
HF's ``run_clm.py`` takes it), not fetched from the Hub.

Run it by hand::

    python examples/hf_trainer/train.py --output_dir /tmp/hf --learning_rate 3e-3 --max_steps 60

``--resume_from_checkpoint <output_dir>/checkpoint-N`` continues from a checkpoint the
Trainer saved.
"""

from __future__ import annotations

import argparse
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to fetch; fail rather than try
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

WORDS = ("the cat dog bird sat ran flew on under over a mat tree roof quickly slowly "
         "and then saw heard big small red blue").split()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    parser.add_argument("--warmup_steps", type=int, default=5)
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--eval_steps", type=int, default=10)
    parser.add_argument("--save_steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config_overrides", default="n_embd=32,n_layer=1,n_head=2,n_positions=32")
    parser.add_argument("--report_to", default="none")
    parser.add_argument("--resume_from_checkpoint", default=None)
    return parser.parse_args()


def sentences(n: int, seed: int) -> list[str]:
    """A toy language with structure to learn: subject, verb, place."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        subject, verb = rng.choice(WORDS[1:4]), rng.choice(WORDS[4:7])
        place = rng.choice(WORDS[11:14])
        out.append(f"the {subject} {verb} {rng.choice(WORDS[7:10])} the {place}")
    return out


def tokenizer_for(text: list[str]) -> PreTrainedTokenizerFast:
    raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(text, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]",
                                   eos_token="[EOS]", pad_token="[EOS]")


class Blocks(torch.utils.data.Dataset):
    """Fixed-length token blocks for causal language modelling."""

    def __init__(self, ids: list[int], block: int):
        self.blocks = [ids[i:i + block] for i in range(0, len(ids) - block, block)]

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        ids = torch.tensor(self.blocks[i])
        return {"input_ids": ids, "labels": ids.clone()}


def main() -> None:
    args = parse_args()
    text = sentences(1200, seed=1234)
    tokenizer = tokenizer_for(text)
    ids = tokenizer(" [EOS] ".join(text))["input_ids"]
    split = int(len(ids) * 0.9)
    config = GPT2Config(vocab_size=tokenizer.vocab_size, bos_token_id=1, eos_token_id=1)
    config.update_from_string(args.config_overrides)
    block = config.n_positions
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.eval_batch_size,
        eval_strategy="steps", eval_steps=args.eval_steps, logging_steps=args.eval_steps,
        save_steps=args.save_steps, save_total_limit=2, seed=args.seed,
        report_to=args.report_to, use_cpu=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=training, train_dataset=Blocks(ids[:split], block),
                      eval_dataset=Blocks(ids[split:], block))
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
