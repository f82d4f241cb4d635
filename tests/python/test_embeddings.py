"""`POST /v1/embeddings` through the official `openai` Python SDK and LangChain's
`OpenAIEmbeddings`, on the real all-MiniLM-L6-v2 weights (`scripts/fetch-weights minilm`):
vectors equal to sentence-transformers' (the committed fixture, made by
scripts/fixtures/embedding-fixtures.py), float and base64 alike; the charge by the rule
(`ceil(prompt_tokens * 5_000 / 1_000_000)` micro-USD at 0.005 USD per 1M tokens) and the
balance moved by exactly that; an idempotent replay; and retrieval: for 10 questions over 50
passages, the passage that answers each ranks first.
"""
import base64
import json
import math
import os
import struct
import uuid

import openai
import pytest
from langchain_openai import OpenAIEmbeddings
from ledger import balance_micros

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
MODEL = "all-MiniLM-L6-v2"
PRICE_MICROS_PER_MTOK = 5_000
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)


def fixture():
    with open(os.path.join(ROOT, "tests/fixtures/embeddings/all-MiniLM-L6-v2.json")) as f:
        items = json.load(f)["items"]
    return [(it["text"], it["tokens"], unpack(it["vector_f32_le_base64"])) for it in items]


def unpack(b64):
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_sdk_vectors_match_sentence_transformers_and_cost_the_rule(client, encoding_format):
    items = fixture()[:8]
    texts = [t for t, _, _ in items]
    before = balance_micros("sdk@example.com")
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=texts, encoding_format=encoding_format)
    r = raw.parse()
    assert [d.index for d in r.data] == list(range(len(texts)))
    for d, (text, _, want) in zip(r.data, items):
        got = unpack(d.embedding) if isinstance(d.embedding, str) else d.embedding
        assert len(got) == 384
        assert cosine(got, want) >= 0.9999, text
    tokens = sum(n for _, n, _ in items)
    assert r.usage.prompt_tokens == tokens and r.usage.total_tokens == tokens
    cost = -(-tokens * PRICE_MICROS_PER_MTOK // 1_000_000)
    body = json.loads(raw.http_response.text)
    assert body["service"]["cost_micros"] == cost
    assert body["service"]["request_id"] == raw.headers["x-request-id"]
    assert before - balance_micros("sdk@example.com") == cost


def test_sdk_default_encoding_and_an_idempotent_replay(client):
    # Without `encoding_format` the SDK asks for base64 and decodes it itself.
    key = f"embed-{uuid.uuid4()}"
    first = client.embeddings.create(model=MODEL, input="a sentence to embed", extra_headers={"Idempotency-Key": key})
    assert len(first.data[0].embedding) == 384
    before = balance_micros("sdk@example.com")
    again = client.embeddings.with_raw_response.create(
        model=MODEL, input="a sentence to embed", extra_headers={"Idempotency-Key": key})
    assert again.headers["idempotent-replayed"] == "true"
    assert again.parse().data[0].embedding == first.data[0].embedding
    assert balance_micros("sdk@example.com") == before, "a replay is not charged again"


def test_sdk_errors_name_the_input(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL, input=["fine", "word " * 300])
    assert e.value.code == "input_too_long" and e.value.param == "input[1]"
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="smollm2-135m-instruct", input="x")
    assert e.value.code == "model_not_supported"


# Fifty passages on different subjects; QUESTIONS name the one that answers each.
PASSAGES = [
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
    "The Great Wall of China stretches for thousands of kilometres across northern China.",
    "Mount Everest, at 8,849 metres, is the highest mountain above sea level.",
    "Honey bees communicate the location of flowers through a waggle dance.",
    "The Pacific is the largest and deepest of Earth's oceans.",
    "Rust is a systems programming language focused on memory safety without garbage collection.",
    "Insulin is a hormone made by the pancreas that regulates blood sugar.",
    "The Mona Lisa was painted by Leonardo da Vinci and hangs in the Louvre.",
    "Jupiter is the largest planet in our solar system, a gas giant with a great red spot.",
    "Sourdough bread rises with wild yeast and lactic acid bacteria instead of commercial yeast.",
    "The Amazon rainforest produces a large share of the world's river water and biodiversity.",
    "A marathon is a long-distance running race of 42.195 kilometres.",
    "Penguins are flightless birds that live mostly in the Southern Hemisphere.",
    "The printing press, invented by Johannes Gutenberg, spread books across Europe.",
    "Coffee beans are the roasted seeds of the Coffea plant's cherries.",
    "Volcanoes erupt when molten rock called magma rises to the surface.",
    "The violin is a string instrument played with a bow and has four strings.",
    "Chess is a board game for two players on a board of 64 squares.",
    "The human heart pumps blood through the body with four chambers.",
    "Bitcoin is a decentralized digital currency created in 2009.",
    "The Sahara is the largest hot desert in the world, covering much of North Africa.",
    "Tides are caused mainly by the gravitational pull of the Moon.",
    "Shakespeare wrote Hamlet, Macbeth and Romeo and Juliet.",
    "Solar panels convert sunlight directly into electricity with photovoltaic cells.",
    "The Nile is often considered the longest river in Africa.",
    "Antibiotics treat bacterial infections but do not work against viruses.",
    "Tea is brewed from the leaves of the Camellia sinensis plant.",
    "The speed of light in a vacuum is about 300,000 kilometres per second.",
    "Origami is the Japanese art of folding paper into shapes.",
    "Elephants are the largest land animals and have long trunks.",
    "The Roman Colosseum hosted gladiator fights in ancient Rome.",
    "A compiler translates source code into machine code before the program runs.",
    "Tomatoes are botanically fruits although they are cooked as vegetables.",
    "The Olympic Games are held every four years with athletes from around the world.",
    "Glaciers are slow-moving rivers of ice formed from compacted snow.",
    "Dolphins use echolocation to find fish in murky water.",
    "The stock market lets investors buy and sell shares of public companies.",
    "Yoga combines breathing, stretching and meditation.",
    "Saturn's rings are made of ice and rock particles.",
    "A bicycle has two wheels and is powered by pedals.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Vaccines train the immune system to recognise a pathogen.",
    "Pizza Margherita is topped with tomato, mozzarella and basil.",
    "Earthquakes happen when tectonic plates slip along faults.",
    "The guitar usually has six strings and is played by strumming or plucking.",
    "Owls are nocturnal birds of prey that can turn their heads far around.",
    "Recycling turns waste materials such as paper and glass into new products.",
    "The Moon landing of Apollo 11 in 1969 put the first humans on the Moon.",
    "Wind turbines generate electricity from the movement of air.",
]
QUESTIONS = [
    ("How tall is the highest mountain in the world?", 3),
    ("Who painted the Mona Lisa?", 8),
    ("What hormone controls blood sugar levels?", 7),
    ("Which programming language promises memory safety without a garbage collector?", 6),
    ("How do bees tell each other where the flowers are?", 4),
    ("What causes the ocean tides?", 22),
    ("How long is a marathon race?", 12),
    ("When did people first walk on the Moon?", 48),
    ("Why do earthquakes happen?", 44),
    ("Do antibiotics work on viruses?", 26),
]


@pytest.fixture(scope="module")
def langchain_embeddings():
    # tiktoken-based length checks would send OpenAI's token ids, which are not this model's
    # vocabulary (and need a download): the texts go as text.
    return OpenAIEmbeddings(model=MODEL, base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"],
                            check_embedding_ctx_length=False, max_retries=0)


def test_langchain_retrieval_ranks_the_answering_passage_first(langchain_embeddings):
    docs = langchain_embeddings.embed_documents(PASSAGES)
    assert len(docs) == 50 and all(len(d) == 384 for d in docs)
    for question, want in QUESTIONS:
        q = langchain_embeddings.embed_query(question)
        ranked = sorted(range(len(docs)), key=lambda i: -cosine(q, docs[i]))
        assert ranked[0] == want, (question, PASSAGES[ranked[0]])
