"""The one tokenizer, and the deterministic prose built from it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mock_upstream.text import chunk_sizes, prose_tokens
from mock_upstream.tokenizer import count_tokens, tokenize


def test_tokens_are_words_with_their_leading_space_and_punctuation() -> None:
    assert tokenize("Hello, world! 12345") == ["Hello", ",", " world", "!", " 123", "45"]
    assert count_tokens("") == 0


@given(st.text())
def test_joining_the_tokens_gives_back_the_text(text: str) -> None:
    assert "".join(tokenize(text)) == text


@given(st.text(max_size=40), st.integers(), st.integers(min_value=1, max_value=300))
def test_prose_has_exactly_the_requested_token_count(prompt: str, seed: int, count: int) -> None:
    tokens = prose_tokens(prompt, seed, count)
    assert len(tokens) == count
    assert tokenize("".join(tokens)) == tokens


def test_prose_is_deterministic_and_depends_on_prompt_and_seed() -> None:
    assert prose_tokens("a", 0, 50) == prose_tokens("a", 0, 50)
    assert prose_tokens("a", 0, 50) != prose_tokens("a", 1, 50)
    assert prose_tokens("a", 0, 50) != prose_tokens("b", 0, 50)


def test_shorter_prose_is_a_prefix_of_longer_prose_but_for_the_last_token() -> None:
    assert prose_tokens("a", 0, 200)[:29] == prose_tokens("a", 0, 30)[:29]


def test_prose_reads_like_sentences() -> None:
    text = "".join(prose_tokens("Tell me about streaming.", 0, 60))
    assert text[0].isupper()
    assert text.endswith(".")
    assert text.count(". ") >= 2


@given(st.text(max_size=40), st.integers(), st.integers(min_value=1, max_value=300))
def test_counting_the_text_received_so_far_counts_the_tokens_sent_so_far(
    prompt: str, seed: int, count: int
) -> None:
    tokens = prose_tokens(prompt, seed, count)
    for end in range(1, count + 1):
        assert count_tokens("".join(tokens[:end])) == end


def test_a_paragraph_break_is_one_token() -> None:
    assert tokenize("end.\n\nNext") == ["end", ".", "\n\n", "Next"]


def test_chunks_carry_one_to_three_tokens_and_add_up() -> None:
    sizes = chunk_sizes("p", 0, 500)
    assert sum(sizes) == 500
    assert set(sizes) == {1, 2, 3}
