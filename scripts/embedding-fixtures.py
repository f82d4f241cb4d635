#!/usr/bin/env python3
"""Reference vectors for tests/embeddings.rs, from sentence-transformers itself.

Writes tests/fixtures/embeddings/<model>.json: the texts, and for each the vector
sentence-transformers gives with `normalize_embeddings=True` (float32, little-endian, base64)
and its token count. Needs sentence-transformers and PyTorch (CPU), which the test suite does
not install; run it by hand in a venv that has them:

    python3 -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers
    /tmp/st/bin/python scripts/embedding-fixtures.py weights/all-MiniLM-L6-v2

The 50 texts mix languages, lengths (one word to about 200 tokens), code, numbers and emoji;
models that read 1,024 tokens or more get a 51st text of about 700 tokens.
"""
import base64
import json
import os
import sys

import numpy as np
from sentence_transformers import SentenceTransformer

SHORT = [
    "hello", "Paris", "The cat sat on the mat.", "How do I reset my password?",
    "Le chat est assis sur le tapis.", "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.", "東京は日本の首都です。",
    "北京是中国的首都。", "Москва — столица России.", "서울은 대한민국의 수도입니다.",
    "القاهرة هي عاصمة مصر.", "नई दिल्ली भारत की राजधानी है।", "Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "Rust is a systems programming language.", "def add(a, b):\n    return a + b",
    "SELECT name FROM users WHERE id = 42;", "3.14159 is approximately pi",
    "I love this product! 😍👍", "Terrible service, never again.", "  leading and trailing spaces  ",
    "ALL CAPS SENTENCE FOR TESTING", "e-mail: someone@example.com, phone +1-555-0100",
    "The mitochondria is the powerhouse of the cell.", "Water boils at 100 degrees Celsius at sea level.",
    "A journey of a thousand miles begins with a single step.", "What is the weather like in Lyon today?",
    "Photosynthesis converts light energy into chemical energy.", "Invoice #2024-117 is overdue by 30 days.",
    "tokenization", "naïve café résumé", "C'est la vie.", "¿Dónde está la biblioteca?",
    "Ich habe keine Ahnung.", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
]

PARAGRAPH = (
    "Retrieval-augmented generation combines a search step with a language model: documents are "
    "split into passages, each passage is embedded into a vector, and at question time the "
    "passages whose vectors lie closest to the question's vector are given to the model as "
    "context. The quality of the embedding model decides which passages are found, so its "
    "vectors must place paraphrases close together and unrelated texts far apart. "
)

LONG = [
    PARAGRAPH,
    PARAGRAPH * 2,
    "The French Revolution began in 1789 and reshaped the political landscape of Europe. "
    "It abolished the monarchy, established a republic, and led to the rise of Napoleon "
    "Bonaparte, whose campaigns spread revolutionary ideas across the continent. Historians "
    "still debate its causes: fiscal crisis, Enlightenment ideas, and social inequality all "
    "played a part.",
    "La Révolution française a commencé en 1789 et a profondément transformé la société. "
    "Elle a aboli les privilèges, proclamé les droits de l'homme et du citoyen, et ouvert une "
    "période d'instabilité politique qui s'est achevée avec le Consulat.",
    "Die Photosynthese ist ein physiologischer Prozess zur Erzeugung von energiereichen "
    "Biomolekülen aus energieärmeren Stoffen mithilfe von Lichtenergie. Sie wird von Pflanzen, "
    "Algen und einigen Bakterien betrieben.",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    "
    "println!(\"{:?}\", v);\n}\n// squares of the first ten integers",
    "机器学习是人工智能的一个分支。它使用统计方法让计算机系统从数据中学习，"
    "而不需要明确编程。深度学习是机器学习的一个子领域，使用多层神经网络。",
    "Customer review: I ordered the blue jacket in size M. It arrived two days late and the "
    "zipper broke after a week. Customer support offered a refund but asked me to pay for the "
    "return shipping, which I found unfair. Two stars.",
    "Meeting notes, 14 March: budget approved for Q2; hiring two engineers; launch moved to "
    "June 3; action items: Ana drafts the announcement, Ben reviews the contracts, Chen "
    "updates the roadmap before Friday.",
    "Symptoms of dehydration include thirst, dark urine, fatigue, dizziness and confusion. "
    "Drink water regularly, especially in hot weather or during exercise.",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "To install the package, run pip install, then import it and call the main function with "
    "a path to your configuration file; errors are written to standard error.",
    "Москва — столица и крупнейший по численности населения город России, её политический, "
    "экономический и культурный центр.",
    "数学は数量や構造、空間、変化などを研究する学問である。",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]

TEXTS = SHORT + LONG

# For models that read more than 512 tokens (EmbeddingGemma): one text of about 700 tokens, past
# the sliding window of its local attention layers.
VERY_LONG = " ".join(LONG[:10]) + " " + PARAGRAPH * 3


def main():
    folder = sys.argv[1]
    model = SentenceTransformer(folder, device="cpu")
    name = os.path.basename(os.path.normpath(folder))
    texts = TEXTS + ([VERY_LONG] if model.max_seq_length >= 1024 else [])
    vectors = model.encode(texts, normalize_embeddings=True, batch_size=8, convert_to_numpy=True)
    counts = [len(model.tokenizer(t)["input_ids"]) for t in texts]
    assert max(counts) <= model.max_seq_length, "a text would be truncated"
    out = {
        "model": name,
        "source": "sentence-transformers " + __import__("sentence_transformers").__version__
        + ", torch " + __import__("torch").__version__ + ", normalize_embeddings=True",
        "items": [
            {
                "text": t,
                "tokens": c,
                "vector_f32_le_base64": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode(),
            }
            for t, c, v in zip(texts, counts, vectors)
        ],
    }
    dest = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "embeddings", name + ".json")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{dest}: {len(texts)} texts, {vectors.shape[1]} dimensions, tokens {min(counts)}..{max(counts)}")


if __name__ == "__main__":
    main()
