"""Build the offline byte-level BPE tokenizer the peer tools load (scripts/bench-peers.sh).

GuideLLM and AIPerf both want a Hugging Face tokenizer and neither runs offline without one
(see shared PEERS.md). This trains a small byte-level BPE on generated text (fixed seed, so the
same vocabulary every time) and saves it as a `PreTrainedTokenizerFast` directory.

Half the training text is made of the simulator's answer words (`WORDS` in
sim/src/text.rs), so each token the simulator streams (a word with its leading space, or a
punctuation mark) is one token of this tokenizer too, as it would be with the model's own
tokenizer: the peers count 256 output tokens for 256 streamed, and their client-side
tokenization of the answer costs what it would cost with a real model.

Usage: python make_tokenizer.py OUT_DIR SIM_TEXT_RS   (run with a venv that has `tokenizers`
and `transformers`; does nothing when OUT_DIR/tokenizer.json already exists)
"""

import os
import random
import re
import sys

SEED = 20261130
VOCAB = 4096


def sim_words(text_rs):
    """The simulator's English answer words: the `WORDS` array of sim/src/text.rs."""
    src = open(text_rs, encoding="utf-8").read()
    body = src.split("const WORDS: &[&str] = &[", 1)[1].split("];", 1)[0]
    words = re.findall(r'"([^"]+)"', body)
    assert len(words) >= 16, f"no WORDS found in {text_rs}"
    return words


def answers(rng, words, lines=20000):
    """Text shaped like the simulator's answers: words with a leading space, `.`/`,`."""
    for _ in range(lines):
        toks = []
        for i in range(rng.randint(8, 40)):
            if i > 0 and rng.random() < 1 / 11:
                toks.append(rng.choice([".", ","]))
            else:
                toks.append((" " if i else "") + rng.choice(words))
        yield "".join(toks)


def corpus(rng, lines=20000):
    syll = ["la", "te", "mesh", "pro", "vi", "der", "to", "ken", "ser", "ve", "stream",
            "chat", "com", "ple", "tion", "in", "fer", "ence", "lat", "en", "cy", "re",
            "gion", "ag", "ent", "co", "or", "di", "na", "an", "the", "of", "and", "is"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    for _ in range(lines):
        n = rng.randint(5, 25)
        s = " ".join(rng.choice(words) for _ in range(n))
        yield s.capitalize() + rng.choice([".", "?", "!", ","]) + " " + str(rng.randint(0, 999))


def main():
    out, text_rs = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(out, "tokenizer.json")):
        print(f"tokenizer: {out} (kept)")
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = list(corpus(rng)) + list(answers(rng, sim_words(text_rs)))
    tok.train_from_iterator(text, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    sample = "".join(next(answers(random.Random(1), sim_words(text_rs), 1)) for _ in range(1))
    n_words = len(re.findall(r"[^ ]+", sample.replace(".", " .").replace(",", " ,")))
    n_tok = len(fast(sample)["input_ids"])
    print(f"tokenizer: {out} (built, vocab {tok.get_vocab_size()}; "
          f"a simulator answer of {n_words} tokens encodes to {n_tok})")


if __name__ == "__main__":
    main()
