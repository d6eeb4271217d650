from memory_core.core.models import ChatMessage, MessageRole
from memory_core.engine.session.entities import OfflineEntityExtractor


def _user(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)


def test_capitalized_names_are_entities_and_sentence_openers_are_not():
    found = OfflineEntityExtractor().update([_user("The meeting with Ana Lopez is in Lisbon. Thanks, I will go.")], {})
    assert set(found) == {"Ana Lopez", "Lisbon"}
    assert found["Lisbon"] == "The meeting with Ana Lopez is in Lisbon."


def test_known_entities_are_found_in_any_case_and_their_summaries_grow():
    extractor = OfflineEntityExtractor()
    known = {"Sam": "Sam works on a hackathon project."}
    found = extractor.update([_user("what does sam like? sam likes rust.")], known)
    assert found["Sam"] == "Sam works on a hackathon project. what does sam like? sam likes rust."


def test_summaries_keep_the_newest_sentences_within_their_limit():
    extractor = OfflineEntityExtractor(max_summary_chars=60)
    summary = ""
    for i in range(10):
        summary = extractor.update([_user(f"Bob visited place number {i}.")], {"Bob": summary})["Bob"]
    assert len(summary) <= 60
    assert summary.endswith("place number 9.")
