"""The larger comparison of SentencePiece-style tokenizers with Hugging Face `tokenizers` (not collected by pytest;
minutes, not seconds): each family of ``hf_spm_tokenizers`` on several MB of generated multilingual text, cut into
documents; ids and decoded text compared document by document, and encoding timed side by side on one thread.

    PYTHONPATH=. python tests/bench_sentencepiece.py --megabytes 4
"""

import argparse
import json
import os
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizers on one thread, as numforge
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from hf_spm_tokenizers import FAMILIES, multilingual  # noqa: E402

from numforge.tokenizer.hf_json import read_tokenizer_json, tokenizer_from_json  # noqa: E402


def documents(megabytes: float) -> list[str]:
    docs, size, seed = [], 0, 100
    while size < megabytes * 1e6:
        docs.append(multilingual(400, seed=seed))
        size, seed = size + len(docs[-1].encode("utf-8")), seed + 1
    return docs


def timed(work) -> tuple[list, float]:
    start = time.perf_counter()
    out = work()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=4.0)
    args = parser.parse_args()
    docs = documents(args.megabytes)
    megabytes = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    print(f"{len(docs)} documents, {megabytes:.2f} MB; load average {os.getloadavg()[0]:.2f}")
    for name, make in FAMILIES.items():
        theirs = make()
        ours = tokenizer_from_json(read_tokenizer_json(name, d=json.loads(theirs.to_str())))
        their_ids, their_s = timed(lambda: [theirs.encode(d, add_special_tokens=False).ids for d in docs])  # noqa: B023
        our_ids, our_s = timed(lambda: [ours.encode(d) for d in docs])  # noqa: B023
        ids_wrong = sum(a != b for a, b in zip(our_ids, their_ids, strict=True))
        text_wrong = sum(ours.decode(i) != theirs.decode(i, skip_special_tokens=False) for i in their_ids)
        fallback = sum(ours.token_piece(t).startswith("<0x") for ids in our_ids for t in ids)
        print(
            f"{name:20s} ids mismatches {ids_wrong}/{len(docs)}, decoded mismatches {text_wrong}/{len(docs)}, "
            f"{fallback:,} byte-fallback tokens; encode numforge {megabytes / our_s:.2f} MB/s, "
            f"tokenizers (1 thread) {megabytes / their_s:.2f} MB/s: ratio {their_s / our_s:.2f}x"
        )
    sentencepiece_model(docs, megabytes)


def sentencepiece_model(docs: list[str], megabytes: float) -> None:
    """A BPE tokenizer.model trained by ``sentencepiece``, read by numforge's protobuf reader: ids and speed."""
    import tempfile

    import sentencepiece as spm

    from numforge.tokenizer.spm_model import load_sentencepiece_model

    with tempfile.TemporaryDirectory() as directory:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(multilingual(20_000).splitlines()), model_prefix=f"{directory}/m", vocab_size=2000,
            model_type="bpe", byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
            minloglevel=2,
        )  # fmt: skip
        theirs, ours = spm.SentencePieceProcessor(model_file=f"{directory}/m.model"), None
        ours = load_sentencepiece_model(f"{directory}/m.model")
    their_ids, their_s = timed(lambda: [theirs.encode(d) for d in docs])
    our_ids, our_s = timed(lambda: [ours.encode_ordinary(d) for d in docs])
    wrong = sum(a != b for a, b in zip(our_ids, their_ids, strict=True))
    print(
        f"{'tokenizer.model':20s} ids mismatches {wrong}/{len(docs)} against sentencepiece; encode numforge "
        f"{megabytes / our_s:.2f} MB/s, sentencepiece {megabytes / their_s:.2f} MB/s: ratio {their_s / our_s:.2f}x"
    )


if __name__ == "__main__":
    main()
