from memory_core.core.tokens import TiktokenCounter, default_counter


def test_cl100k_counts_real_tokens_offline():
    counter = TiktokenCounter()
    assert counter.count("") == 0
    assert counter.count("hello") == 1
    assert counter.count("Hello world, this is a test of the tokenizer.") == 11
    assert counter.count("<|endoftext|>") > 1  # special tokens in user text are text


def test_the_default_counter_is_loaded_once():
    assert default_counter() is default_counter()
