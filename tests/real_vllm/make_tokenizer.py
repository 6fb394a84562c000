# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write an offline tokenizer (tokenizer.json, tokenizer_config.json with a chat template) into DIR.

Test fixture of make check-real-vllm (scripts/check-real-vllm.sh); runs in the real-vLLM venv, whose
``tokenizers`` package (pulled in by vLLM) trains a byte-level BPE on the sentences below, so that no
tokenizer is downloaded from a hub. Prints the vocabulary size, which the model's config.json must
match (tests/fake_model/make_model.py --vocab).

    python make_tokenizer.py DIR [--vocab N]
"""

import argparse
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START = "<|start_header|>"
END = "<|end_header|>"
SPECIALS = [BOS, EOS, START, END]
# A simple Llama-3-like chat template: vLLM's chat completions need one in tokenizer_config.json.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header|>{{ message['role'] }}<|end_header|>\n\n{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|start_header|>assistant<|end_header|>\n\n{% endif %}"
)
CORPUS = [
    "Write a detailed story about a lighthouse keeper who finds a message in a bottle.",
    "Reply with the single word ready.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A lab admin deploys vLLM on two Tesla V100 GPUs and measures the time to first token.",
    "Every morning the keeper climbed the stairs, cleaned the lamp and wrote the weather in a book.",
    "Tensor parallelism over PCIe is slower than over NVLink, so the benchmark compares both settings.",
    "She opened the bottle, unrolled the paper and read the words written in faded blue ink.",
    "Throughput grows with concurrency until the memory bandwidth of the GPU is the limit.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000, colons: semicolons; quotes \"like this\" and (brackets).",
]


def build(vocab):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # a few rounds of the sentences, so that the merges have counts to rank by
    tokenizer.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--vocab", type=int, default=512, help="vocabulary size to train to (at most)")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    tokenizer = build(args.vocab)
    tokenizer.save(os.path.join(args.dir, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "pad_token": EOS, "add_bos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": 2048, "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(args.dir, "tokenizer_config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = {token: tokenizer.token_to_id(token) for token in (BOS, EOS)}
    # round trip: what the engine's detokenizer will do
    sample = CORPUS[0]
    if tokenizer.decode(tokenizer.encode(sample).ids) != sample:
        sys.exit("make_tokenizer: the tokenizer does not round-trip %r" % sample)
    print(json.dumps({"vocab_size": size, "bos_token_id": ids[BOS], "eos_token_id": ids[EOS]}))


if __name__ == "__main__":
    main()
