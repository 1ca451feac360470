"""The transformers token-classification NER backend on a tiny model built here (random BERT weights, a tokenizer
trained locally with `tokenizers`). The classifier head is set so every token gets one chosen tag, which makes
the expected entities exact and exercises the real path (transformers' token-classification pipeline): windows ->
offsets -> words -> B/I grouping -> label mapping."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-DATE", "I-DATE"]
CORPUS = [
    "UMongameli uCyril Ramaphosa uvakashele eThekwini ngoMsombuluko.",
    "Thabo o ile Maseru ka Labobedi le Ntate Mokoena.",
    "President Cyril Ramaphosa visited Durban on Monday.",
    "Ikomiti le-ANC lihlangane eKapa ngomhla ziyi-12 kuJuni.",
] * 20


def build_model(tmp: Path, kind: str, forced_label: str, model_max_length: int = 16) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    if kind == "wordpiece":  # BERT-style: splits punctuation off words
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=200, special_tokens=special)
    else:  # XLM-R style: SentencePiece unigram with the "▁" metaspace
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=special, unk_token="[UNK]")
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        id2label=dict(enumerate(LABELS)),
        label2id={lab: i for i, lab in enumerate(LABELS)},
    )
    torch.manual_seed(0)
    model = BertForTokenClassification(config)
    with torch.no_grad():  # every token gets `forced_label`, whatever the (random) encoder says
        model.classifier.weight.zero_()
        model.classifier.bias.fill_(-10.0)
        model.classifier.bias[LABELS.index(forced_label)] = 10.0
    out = tmp / f"{kind}-{forced_label}"
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


TEXT = "UMongameli uCyril Ramaphosa (😀) uvakashele eThekwini ngoMsombuluko, é naïve."


def expected_words(kind: str, text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]+", text) if kind == "wordpiece" else text.split()


# The pipeline's words: WordPiece marks continuations ("##"); a tokenizer without such a mark (SentencePiece, as
# XLM-R) gets transformers' fallback (a token right after a non-space continues the word), where an [UNK] token
# always starts a word: the tiny unigram vocabulary knows neither ",", "é" nor "ï".
PIPELINE_WORDS = {
    "wordpiece": expected_words("wordpiece", TEXT),
    "unigram": [
        "UMongameli",
        "uCyril",
        "Ramaphosa",
        "(😀)",
        "uvakashele",
        "eThekwini",
        "ngoMsombuluko",
        ",",  # [UNK]
        "é",  # [UNK]
        "na",
        "ïve.",  # [UNK] then known pieces
    ],
}


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_every_word_tagged_b_gives_one_entity_per_word(tmp_path, kind):
    from engines.text.ner import TransformersNER

    ner = TransformersNER(str(build_model(tmp_path, kind, "B-PER")))
    ents = ner.recognise([TEXT])[0]
    assert all(TEXT[e.start : e.end] == e.word for e in ents)
    assert [e.word for e in ents] == PIPELINE_WORDS[kind]
    assert {e.entity for e in ents} == {"person"}  # B-PER -> lower-case name


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_long_text_every_word_once_across_overlapping_windows(tmp_path, kind):
    from engines.text.ner import TransformersNER

    # 32-token windows overlapping by 14 tokens, more than the longest word takes: each word is whole in some
    # window, and where two windows both hold (part of) it the pipeline keeps the longer entity
    model = build_model(tmp_path, kind, "B-PER", model_max_length=32)
    ner = TransformersNER(str(model), max_length=32, stride=14)
    text = " ".join([CORPUS[0], CORPUS[1]] * 3) + "  "
    assert len(ner._pipeline.tokenizer(text)["input_ids"]) > 32 + (32 - 2 - 14)  # three windows or more
    ents = ner.recognise([text])[0]
    assert all(text[e.start : e.end] == e.word and e.entity == "person" for e in ents)
    assert [e.word for e in ents] == expected_words(kind, text)
    assert [e.start for e in ents] == sorted({e.start for e in ents})  # in order, none twice


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_inside_tags_merge_into_one_entity_within_a_window(tmp_path, kind):
    from engines.text.ner import TransformersNER

    ner = TransformersNER(str(build_model(tmp_path, kind, "I-LOC", model_max_length=64)), max_length=64)
    text = " " + CORPUS[0] + "  "
    ents = ner.recognise([text])[0]
    assert [(e.entity, e.word) for e in ents] == [("location", text.strip())]
    assert text[ents[0].start : ents[0].end] == ents[0].word


def test_date_and_org_labels_map_to_lower_case(tmp_path):
    from engines.text.ner import TransformersNER, map_label

    assert map_label("ORG") == "organisation" and map_label("DATE") == "date" and map_label("GPE") == "location"
    ents = TransformersNER(str(build_model(tmp_path, "wordpiece", "B-ORG"))).recognise(["SABC eGoli"])[0]
    assert [(e.entity, e.word) for e in ents] == [("organisation", "SABC"), ("organisation", "eGoli")]
