from gateway.routing.tokens import TokenCounter
from probes.sentinels.filler import filler_sentences, sentence, with_needle


def test_filler_has_at_most_the_asked_tokens_and_nearly_all_of_them():
    counter = TokenCounter()
    for size in (20, 300, 1500):
        text = " ".join(filler_sentences(size, counter.count_text))
        n = counter.count_text(text)
        assert size - 12 <= n <= size  # one sentence is about ten tokens


def test_filler_is_deterministic_and_neighbours_differ():
    counter = TokenCounter()
    assert filler_sentences(200, counter.count_text) == filler_sentences(200, counter.count_text)
    assert all(sentence(i) != sentence(i + 1) for i in range(200))


def test_needle_goes_after_the_share_of_sentences():
    sentences = [f"S{i}." for i in range(10)]
    assert with_needle(sentences, "N.", 0.0).startswith("N. S0.")
    assert with_needle(sentences, "N.", 0.5).split(" ")[5] == "N."
    assert with_needle(sentences, "N.", 1.0).endswith("S9. N.")
