#!/usr/bin/env python3
"""worldgen.py - a seeded generator of fictional worlds for retrieval QA.

A world holds countries, cities, people, organisations and works (films,
books) with relations stored in ONE direction each, so that a bridge question
really needs two passages:

    person  --born in-->    city        person --works for--> organisation
    org     --founded by--> person      org    --based in-->  city
    work    --directed/written by--> person
    city    --located in--> country     country --capital--> city

Each entity gets one passage (40-200 tokens) written with varied sentence
templates and filler sentences. Questions come in three HotpotQA types:
single-hop ("type": "single"), two-hop "bridge" and "comparison".

Entity names are split between train / dev / test by a hash of the name, so
the splits have DISJOINT entity sets (a test question is always about names
the model never saw in training).

Outputs (standard library only, no third-party packages):
  corpus   JSONL for lazyingest: {"id", "title", "text"} one passage a line
  questions HotpotQA format: _id, question, answer, supporting_facts,
           context [[title, [sentences]]], type, level; plus context_ids (the
           corpus ids of the context passages, in order) and gold_ids.
  training contexts (used by datasets/train/train.py through make_context):
           k passages and up to n question/answer pairs answerable from them.

Commands:
  worldgen.py split --split test --seed 3 --worlds 40 --per-type 500 --out build/qa/test
  worldgen.py demo --out datasets/demo
  worldgen.py text --split train --seed 1 --worlds 2000 --out build/qa/bpe_text.txt
"""
import argparse
import json
import os
import random
import sys
import zlib
from multiprocessing import Pool

# ---------------------------------------------------------------- names

SPLIT_IDS = {"train": 2, "dev": 1, "test": 0}


def split_of(name):
    """The split an entity name belongs to: crc32 mod 20 (0 test, 1 dev, else train)."""
    h = zlib.crc32(name.encode("utf-8")) % 20
    return "test" if h == 0 else "dev" if h == 1 else "train"


ONSETS = ["b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "kr", "l", "m", "n", "p", "pr",
          "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z", "", "", "al", "el", "or"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ia", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "nd", "rt", "k", "th", "x", "v"]
FIRST_END = ["a", "o", "en", "ia", "an", "el", "ine", "us", "is", "y", "or", "ette", "ias", "ard"]
LAST_END = ["son", "berg", "ley", "ova", "ez", "ski", "ton", "mann", "ari", "ell", "ford", "wick", "ani",
            "ier", "ard", "ens", "ic", "oli", "sen", "ero"]
CITY_END = ["ford", "heim", "polis", "burg", "ville", "port", "grad", "holm", "mouth", "stad", "ora", "ana",
            "ton", "field", "bridge", "haven", "dale", "ria", "ino", "esk"]
COUNTRY_END = ["ia", "land", "stan", "ora", "mark", "onia", "aria", "esh", "avia", "idor"]
ORG_KIND = ["Dynamics", "Holdings", "Systems", "Works", "Institute", "Laboratories", "Group", "Partners",
            "Industries", "Foundation", "Studios", "Press", "Bank", "Motors", "Energy", "Pharma", "Records",
            "Analytics", "Shipping", "Textiles", "Robotics", "Airlines", "Foods", "Mining"]
ADJ = ["Silent", "Crimson", "Hollow", "Golden", "Last", "Broken", "Distant", "Quiet", "Burning", "Frozen",
       "Hidden", "Endless", "Velvet", "Paper", "Iron", "Glass", "Restless", "Lonely", "Bright", "Wild",
       "Secret", "Falling", "Northern", "Seventh", "Painted", "Sleeping", "Electric", "Winter", "Amber", "Pale"]
NOUN = ["Harbor", "Garden", "River", "Mirror", "Lantern", "Empire", "Orchard", "Tide", "Signal", "Archive",
        "Meadow", "Crown", "Compass", "Machine", "Forest", "Bridge", "Citadel", "Season", "Voyage", "Letter",
        "Tower", "Island", "Engine", "Promise", "Shadow", "Carnival", "Horizon", "Valley", "Kingdom", "Clock"]
OF_NOUN = ["Salt", "Ashes", "Rain", "Glass", "Dust", "Stars", "Thorns", "Smoke", "Echoes", "Wolves", "Bells",
           "Lanterns", "Ghosts", "Strangers", "Summer", "Tomorrow"]

OCCUPATIONS = ["architect", "engineer", "chemist", "painter", "novelist", "economist", "physician", "lawyer",
               "composer", "journalist", "botanist", "mathematician", "photographer", "sculptor", "historian",
               "pilot", "banker", "astronomer", "diplomat", "geologist", "film director", "teacher", "chef",
               "linguist", "pharmacist", "surveyor", "cartographer", "actor", "poet", "designer"]
INDUSTRIES = ["software", "shipbuilding", "publishing", "banking", "mining", "textile", "pharmaceutical",
              "aerospace", "food processing", "energy", "telecommunications", "automotive", "insurance",
              "retail", "logistics", "media", "robotics", "chemical"]
GENRES_FILM = ["drama", "comedy", "thriller", "western", "science fiction", "horror", "musical", "war",
               "crime", "romance", "documentary", "adventure"]
GENRES_BOOK = ["historical", "detective", "fantasy", "science fiction", "romance", "satirical", "gothic",
               "adventure", "crime", "coming-of-age"]
LANGUAGES = ["Velric", "Ostran", "Maldic", "Teshan", "Corvic", "Ambrese", "Dunic", "Seralian", "Quorran",
             "Halvish", "Pellish", "Yarric"]
REGIONS = ["northern", "southern", "eastern", "western", "central", "coastal", "alpine", "island"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
HOBBIES = ["sailing", "chess", "gardening", "mountain climbing", "collecting old maps", "playing the cello",
           "birdwatching", "long-distance running", "baking", "amateur astronomy", "fencing", "poetry"]
TRAITS = ["a dry sense of humour", "meticulous notebooks", "long walks before dawn", "a fondness for jazz",
          "an enormous library", "generosity towards students", "a famously untidy office",
          "blunt interviews", "an interest in old clocks", "a love of trains"]
AWARDS = ["Orland Prize", "Vesper Medal", "Kaltern Award", "Silver Quill", "Brannock Fellowship",
          "Mirelle Prize", "Hadley Medal", "Corvain Award"]
FEATURES = ["its old harbour", "a covered market", "its university", "a cathedral with two towers",
            "its annual lantern festival", "a large botanical garden", "narrow canals", "its textile mills",
            "a hilltop fortress", "the longest bridge in the region", "its spring horse fair",
            "a museum of clocks"]
PRODUCTS = ["affordable engines", "durable fabrics", "reliable ledgers", "compact radios", "medical devices",
            "cargo vessels", "educational books", "frozen foods", "solar panels", "industrial robots"]


def syllable(r):
    return r.choice(ONSETS) + r.choice(VOWELS) + r.choice(CODAS)


def make_word(r, n_syll, ending):
    w = "".join(syllable(r) for _ in range(n_syll)) + ending
    return w[:1].upper() + w[1:]


class Names:
    """Draws unique names of one split."""

    def __init__(self, r, split, used):
        self.r, self.split, self.used = r, split, used

    def _take(self, gen):
        for _ in range(1000):
            n = gen()
            if len(n) < 4 or n in self.used or split_of(n) != self.split:
                continue
            self.used.add(n)
            return n
        raise RuntimeError("name space exhausted")

    def person(self):
        r = self.r
        return self._take(lambda: make_word(r, r.randint(1, 2), r.choice(FIRST_END)) + " "
                          + make_word(r, r.randint(1, 2), r.choice(LAST_END)))

    def city(self):
        r = self.r
        return self._take(lambda: make_word(r, r.randint(1, 2), r.choice(CITY_END)))

    def country(self):
        r = self.r
        return self._take(lambda: make_word(r, r.randint(1, 2), r.choice(COUNTRY_END)))

    def org(self):
        r = self.r
        return self._take(lambda: make_word(r, r.randint(1, 2), r.choice(["", "a", "o", "ex", "on", "is"]))
                          + " " + r.choice(ORG_KIND))

    def work(self):
        r = self.r

        def gen():
            k = r.random()
            if k < 0.25:
                return "The %s %s" % (r.choice(ADJ), r.choice(NOUN))
            if k < 0.4:
                return "%s of %s" % (r.choice(NOUN), r.choice(OF_NOUN))
            if k < 0.55:
                return "%s %s" % (r.choice(ADJ), r.choice(NOUN) + r.choice(["", "s"]))
            if k < 0.8:
                return "The %s of %s" % (r.choice(NOUN), make_word(r, r.randint(1, 2), r.choice(["a", "o", "is", ""])))
            return "%s %s" % (make_word(r, r.randint(1, 2), r.choice(["a", "en", "or", ""])), r.choice(NOUN))
        return self._take(gen)


# ---------------------------------------------------------------- world

def fmt_date(d, m, y):
    return "%d %s %d" % (d, MONTHS[m - 1], y)


def _pop(x):
    """Population from a draw x in [12, 980]: always six digits (100,000 .. 999,000), so
    comparing two populations is comparing digit by digit (one draw, as before, so the
    names that follow in the random stream do not change)."""
    return (100 + (x - 12) * 899 // 968) * 1000


def make_world(seed, split, used=None, size=None):
    """A world of entities (dicts) with ids, names and relations."""
    r = random.Random(seed)
    used = set() if used is None else used
    nm = Names(r, split, used)
    size = size or {}
    nc = size.get("countries", r.randint(3, 5))
    ncity = size.get("cities", r.randint(8, 14))
    nper = size.get("people", r.randint(18, 30))
    norg = size.get("orgs", r.randint(7, 12))
    nwork = size.get("works", r.randint(7, 12))
    tag = "%s%d" % (split[:2], seed)
    W = {"countries": [], "cities": [], "people": [], "orgs": [], "works": [], "seed": seed}
    for i in range(nc):
        W["countries"].append({"kind": "country", "id": "%s-country%d" % (tag, i), "name": nm.country(),
                               "language": r.choice(LANGUAGES), "region": r.choice(REGIONS),
                               "year": r.randint(1600, 1960)})
    for i in range(ncity):
        W["cities"].append({"kind": "city", "id": "%s-city%d" % (tag, i), "name": nm.city(),
                            "country": W["countries"][i % nc if i < nc else r.randrange(nc)],
                            "pop": _pop(r.randint(12, 980)), "year": r.randint(900, 1850),
                            "feature": r.choice(FEATURES)})
    for c in W["countries"]:  # capital: one of its cities
        cs = [x for x in W["cities"] if x["country"] is c]
        c["capital"] = r.choice(cs)
    for i in range(nper):
        W["people"].append({"kind": "person", "id": "%s-person%d" % (tag, i), "name": nm.person(),
                            "day": r.randint(1, 28), "month": r.randint(1, 12), "year": r.randint(1850, 1995),
                            "city": r.choice(W["cities"]), "occupation": r.choice(OCCUPATIONS),
                            "she": r.random() < 0.5, "moved": r.choice(W["cities"]) if r.random() < 0.3 else None,
                            "hobby": r.choice(HOBBIES), "trait": r.choice(TRAITS),
                            "award": r.choice(AWARDS) if r.random() < 0.4 else None})
    for i in range(norg):
        founder = r.choice(W["people"])
        W["orgs"].append({"kind": "org", "id": "%s-org%d" % (tag, i), "name": nm.org(),
                          "founder": founder, "city": r.choice(W["cities"]),
                          "industry": r.choice(INDUSTRIES), "year": min(2020, founder["year"] + r.randint(20, 55)),
                          "staff": r.randint(2, 90) * 100, "product": r.choice(PRODUCTS)})
    for p in W["people"]:
        p["employer"] = r.choice(W["orgs"])
        p["since"] = min(2020, p["year"] + r.randint(20, 45))
    for i in range(nwork):
        film = r.random() < 0.55
        creator = r.choice(W["people"])
        W["works"].append({"kind": "work", "id": "%s-work%d" % (tag, i), "name": nm.work(), "film": film,
                           "creator": creator, "year": min(2023, creator["year"] + r.randint(18, 60)),
                           "genre": r.choice(GENRES_FILM if film else GENRES_BOOK),
                           "award": r.choice(AWARDS) if r.random() < 0.3 else None})
    W["all"] = W["countries"] + W["cities"] + W["people"] + W["orgs"] + W["works"]
    for e in W["all"]:
        e["passage"] = None
    return W


# ---------------------------------------------------------------- passages
# Each passage is a list of sentences; every fact sentence is tagged with the
# relation it states so questions can name their supporting sentence.

def _a(word):
    return "an" if word[0] in "aeiou" else "a"


def _pr(e):
    return ("She", "she", "her") if e["she"] else ("He", "he", "his")


def person_passage(p, r):
    P, pl, pos = _pr(p)
    n, c, d = p["name"], p["city"]["name"], fmt_date(p["day"], p["month"], p["year"])
    o, occ = p["employer"]["name"], p["occupation"]
    art = _a(occ)
    S = []
    k = r.randrange(5)
    if k == 0:
        S.append((["born", "birth"], "%s was born on %s in %s." % (n, d, c)))
    elif k == 1:
        S.append((["born", "birth"], "%s was born in %s on %s." % (n, c, d)))
    elif k == 2:
        S.append((["born", "birth"], "Born on %s in %s, %s grew up there." % (d, c, n)))
    elif k == 3:
        S.append((["birth", "occ"], "%s (born %s) is %s %s." % (n, d, art, occ)))
        S.append((["born"], "%s was born in %s." % (P, c)))
    else:
        S.append((["birth", "occ"], "%s is %s %s born on %s." % (n, art, occ, d)))
        S.append((["born"], "%s birthplace is %s." % (pos.capitalize(), c)))
    if not any("occ" in t for t, _ in S):
        S.append((["occ"], r.choice(["%s works as %s %s." % (P, art, occ), "%s is %s %s by profession." % (P, art, occ),
                                      "By training %s is %s %s." % (pl, art, occ)])))
    S.append((["employer"], r.choice(["%s works for %s." % (P, o), "%s is employed by %s." % (P, o),
                                       "Since %d %s has worked at %s." % (p["since"], pl, o),
                                       "%s joined %s in %d." % (P, o, p["since"]),
                                       "%s current employer is %s." % (pos.capitalize(), o)])))
    F = []
    if p["moved"] is not None and p["moved"] is not p["city"]:
        F.append(r.choice(["Later %s moved to %s." % (pl, p["moved"]["name"]),
                           "%s spent several years in %s." % (P, p["moved"]["name"])]))
    F.append(r.choice(["In %s free time %s enjoys %s." % (pos, pl, p["hobby"]), "%s is fond of %s." % (P, p["hobby"])]))
    F.append(r.choice(["Colleagues remember %s for %s." % ("her" if p["she"] else "him", p["trait"]),
                       "%s is known for %s." % (P, p["trait"])]))
    if p["award"]:
        F.append("In %d %s received the %s." % (min(2023, p["year"] + r.randint(25, 60)), pl, p["award"]))
    F.append(r.choice(["%s has given many public lectures." % P, "%s rarely speaks to the press." % P,
                       "%s has two children." % P, "%s keeps a small garden." % P,
                       "Friends describe %s as patient and curious." % ("her" if p["she"] else "him")]))
    return _mix(S, F, r)


def org_passage(o, r):
    n, f, c, y = o["name"], o["founder"]["name"], o["city"]["name"], o["year"]
    ind = o["industry"]
    S = []
    k = r.randrange(4)
    if k == 0:
        S.append((["founder", "year", "industry"], "%s is %s %s company founded in %d by %s." % (n, _a(ind), ind, y, f)))
    elif k == 1:
        S.append((["founder", "year"], "%s was founded by %s in %d." % (n, f, y)))
        S.append((["industry"], "It works in the %s industry." % ind))
    elif k == 2:
        S.append((["founder", "year", "industry"], "Founded in %d by %s, %s is %s %s firm." % (y, f, n, _a(ind), ind)))
    else:
        S.append((["industry"], "%s is %s %s company." % (n, _a(ind), ind)))
        S.append((["founder"], "Its founder is %s." % f))
        S.append((["year"], "The company was established in %d." % y))
    S.append((["city"], r.choice(["It is based in %s." % c, "Its headquarters are in %s." % c,
                                   "%s is headquartered in %s." % (n, c), "The company is located in %s." % c])))
    F = [r.choice(["It employs about %d people." % o["staff"], "The firm has roughly %d employees." % o["staff"]]),
         r.choice(["It is best known for %s." % o["product"], "Its main products are %s." % o["product"]]),
         r.choice(["The company opened a second office in %d." % min(2023, y + r.randint(5, 60)),
                   "In %d it was listed on the stock exchange." % min(2023, y + r.randint(10, 80)),
                   "Its logo is a green circle.", "It sponsors a local football club."]),
         r.choice(["Its annual report is published every spring.", "Employees describe the culture as informal.",
                   "The firm survived a difficult period of restructuring.",
                   "It runs a training programme for young apprentices."]),
         r.choice(["Several of its early designs are now kept in a museum.",
                   "It has been criticised for its long working hours.",
                   "The board meets four times a year.", "Its shares are held mostly by former employees."])]
    return _mix(S, F, r)


def work_passage(w, r):
    n, c, y, g = w["name"], w["creator"]["name"], w["year"], w["genre"]
    S = []
    if w["film"]:
        k = r.randrange(3)
        if k == 0:
            S.append((["creator", "year"], "%s is a %d %s film directed by %s." % (n, y, g, c)))
        elif k == 1:
            S.append((["creator"], "%s is a %s film directed by %s." % (n, g, c)))
            S.append((["year"], "It was released in %d." % y))
        else:
            S.append((["year"], "Released in %d, %s is a %s film." % (y, n, g)))
            S.append((["creator"], "The film was directed by %s." % c))
    else:
        k = r.randrange(3)
        if k == 0:
            S.append((["creator", "year"], "%s is a %s novel written by %s, published in %d." % (n, g, c, y)))
        elif k == 1:
            S.append((["creator"], "%s is a %s novel by %s." % (n, g, c)))
            S.append((["year"], "It was first published in %d." % y))
        else:
            S.append((["year"], "First published in %d, %s is a %s novel." % (y, n, g)))
            S.append((["creator"], "It was written by %s." % c))
    F = [r.choice(["Critics praised its %s." % r.choice(["pacing", "dialogue", "music", "ending", "characters"]),
                   "It received mixed reviews at first.", "It was a modest commercial success."])]
    if w["award"]:
        F.append("It won the %s." % w["award"])
    F.append(r.choice(["A sequel was planned but never made.", "It has been translated into several languages.",
                       "The story follows two siblings over one long summer.",
                       "It is set in a small coastal town.", "Its title comes from an old song."]))
    F.append(r.choice(["The %s was later adapted for the stage." % ("film" if w["film"] else "book"),
                       "Many readers and viewers consider it a minor classic.",
                       "Its opening scene is often quoted.", "It was banned for a short time in some places."]))
    F.append(r.choice(["The main character is a retired %s." % r.choice(OCCUPATIONS),
                       "Much of the story takes place during a storm.",
                       "It deals with memory, loss and family.", "It contains very little dialogue."]))
    return _mix(S, F, r)


def city_passage(c, r):
    n, k = c["name"], c["country"]["name"]
    pop = "{:,}".format(c["pop"])
    S = [(["country"], r.choice(["%s is a city in %s." % (n, k), "%s is a town located in %s." % (n, k),
                                  "%s lies in %s." % (n, k)])),
         (["pop"], r.choice(["It has a population of about %s." % pop, "About %s people live there." % pop,
                             "Its population is roughly %s." % pop])),
         (["year"], r.choice(["The city was founded in %d." % c["year"], "It was founded in %d." % c["year"],
                              "Records show it was founded in %d." % c["year"]]))]
    F = [r.choice(["%s is known for %s." % (n, c["feature"]), "Visitors come for %s." % c["feature"]]),
         r.choice(["The climate is mild.", "Winters there are long and cold.", "A river runs through the centre.",
                   "The old town was rebuilt after a fire.", "It is connected to the coast by rail."]),
         r.choice(["Its football team has never won the league.", "The local dialect is hard for outsiders.",
                   "Many of its buildings are made of red brick.", "A famous clock stands in the main square."]),
         r.choice(["Tourism has become important to the local economy.", "It hosts a small airport.",
                   "The surrounding hills are covered in vineyards.", "Its markets open early every Saturday."])]
    return _mix(S, F, r)


def country_passage(c, r):
    n = c["name"]
    S = [(["capital"], r.choice(["%s is a country whose capital is %s." % (n, c["capital"]["name"]),
                                 "The capital of %s is %s." % (n, c["capital"]["name"])])),
         (["language"], r.choice(["Its official language is %s." % c["language"],
                                  "Most people there speak %s." % c["language"]])),
         (["year"], r.choice(["It became independent in %d." % c["year"],
                              "%s declared independence in %d." % (n, c["year"]), ]))]
    F = [r.choice(["It lies in the %s part of the continent." % c["region"], "It is a %s country." % c["region"]]),
         r.choice(["Its flag is blue and white.", "Farming and trade dominate its economy.",
                   "It has a small but busy parliament.", "Tourism has grown quickly there."]),
         r.choice(["Its national dish is a slow-cooked stew.", "The country is famous for its mountain railways.",
                   "Football is the most popular sport there.", "It has a long tradition of choral music."]),
         r.choice(["Its currency is stable.", "Elections are held every five years.",
                   "Much of the north is covered by forest.", "Its coastline is known for steep cliffs."])]
    return _mix(S, F, r)


def _mix(S, F, r, min_words=32):
    """First fact sentence stays first; the other facts and fillers are shuffled. A passage
    under min_words words (about 40 tokens) gets the unused fillers appended (no further
    random draws, so the rest of the world does not change)."""
    all_f = F
    n_f = r.randint(min(2, len(F)), len(F))
    F = r.sample(F, n_f)
    rest = S[1:] + [([], f) for f in F]
    r.shuffle(rest)
    out = [S[0]] + rest
    words = sum(len(x.split()) for _, x in out)
    for f in all_f:
        if words >= min_words:
            break
        if f not in F:
            out.append(([], f))
            words += len(f.split())
    return out


PASSAGE = {"person": person_passage, "org": org_passage, "work": work_passage, "city": city_passage,
           "country": country_passage}


def passage(e, r):
    """[(tags, sentence)] for entity e, made once per world."""
    if e["passage"] is None:
        e["passage"] = PASSAGE[e["kind"]](e, r)
    return e["passage"]


def sentences(e, r):
    return [s for _, s in passage(e, r)]


def fact_index(e, r, tag):
    for i, (tags, _) in enumerate(passage(e, r)):
        if tag in tags:
            return i
    raise KeyError((e["name"], tag))


# ---------------------------------------------------------------- questions
# A question: (type, text, answer, [(entity, fact tag)], [entities]).

def _q(r, forms, **kw):
    return r.choice(forms).format(**kw)


def single_questions(e, r):
    """All single-hop questions about e (one per fact), as (text, answer, tag)."""
    n = e["name"]
    k = e["kind"]
    if k == "person":
        return [(_q(r, ["Where was {n} born?", "In which city was {n} born?", "What is the birthplace of {n}?"], n=n),
                 e["city"]["name"], "born"),
                (_q(r, ["In which year was {n} born?", "What year was {n} born in?"], n=n), str(e["year"]), "birth"),
                (_q(r, ["When was {n} born?", "What is the date of birth of {n}?"], n=n),
                 fmt_date(e["day"], e["month"], e["year"]), "birth"),
                (_q(r, ["Which organisation does {n} work for?", "Who employs {n}?", "Where does {n} work?"], n=n),
                 e["employer"]["name"], "employer"),
                (_q(r, ["What is the occupation of {n}?", "What does {n} do for a living?"], n=n),
                 e["occupation"], "occ")]
    if k == "org":
        return [(_q(r, ["Who founded {n}?", "Who is the founder of {n}?"], n=n), e["founder"]["name"], "founder"),
                (_q(r, ["In which year was {n} founded?", "When was {n} founded?"], n=n), str(e["year"]), "year"),
                (_q(r, ["Where is {n} based?", "In which city is {n} headquartered?"], n=n), e["city"]["name"], "city"),
                (_q(r, ["In which industry does {n} operate?", "What industry is {n} in?"], n=n), e["industry"],
                 "industry")]
    if k == "work":
        verb = "directed" if e["film"] else "wrote"
        return [(_q(r, ["Who %s {n}?" % verb, "Who is the %s of {n}?" % ("director" if e["film"] else "author")],
                    n=n), e["creator"]["name"], "creator"),
                (_q(r, ["In which year was {n} %s?" % ("released" if e["film"] else "published"),
                        "When did {n} come out?"], n=n), str(e["year"]), "year")]
    if k == "city":
        return [(_q(r, ["In which country is {n}?", "Which country is {n} located in?"], n=n), e["country"]["name"],
                 "country"),
                (_q(r, ["What is the population of {n}?", "How many people live in {n}?"], n=n),
                 "{:,}".format(e["pop"]), "pop"),
                (_q(r, ["When was {n} founded?", "In which year was the city of {n} founded?"], n=n), str(e["year"]),
                 "year")]
    return [(_q(r, ["What is the capital of {n}?", "Which city is the capital of {n}?"], n=n),
             e["capital"]["name"], "capital"),
            (_q(r, ["What is the official language of {n}?", "Which language is spoken in {n}?"], n=n), e["language"],
             "language"),
            (_q(r, ["When did {n} become independent?", "In which year did {n} gain independence?"], n=n),
             str(e["year"]), "year")]


def bridge_questions(e, r):
    """Two-hop questions that start at e: (text, answer, [(entity, tag), (entity, tag)])."""
    n = e["name"]
    k = e["kind"]
    out = []
    if k == "org":
        f = e["founder"]
        out.append((_q(r, ["In which city was the founder of {n} born?", "Where was the founder of {n} born?"], n=n),
                    f["city"]["name"], [(e, "founder"), (f, "born")]))
        out.append((_q(r, ["In which year was the founder of {n} born?", "What year was the founder of {n} born in?"],
                       n=n), str(f["year"]), [(e, "founder"), (f, "birth")]))
        out.append((_q(r, ["Which organisation employs the founder of {n}?",
                           "Who does the founder of {n} work for?"], n=n),
                    f["employer"]["name"], [(e, "founder"), (f, "employer")]))
        c = e["city"]
        out.append((_q(r, ["In which country is {n} based?", "In which country are the headquarters of {n}?"], n=n),
                    c["country"]["name"], [(e, "city"), (c, "country")]))
    elif k == "work":
        p = e["creator"]
        role = "director" if e["film"] else "author"
        out.append((_q(r, ["Where was the %s of {n} born?" % role, "In which city was the %s of {n} born?" % role],
                       n=n), p["city"]["name"], [(e, "creator"), (p, "born")]))
        out.append((_q(r, ["In which year was the %s of {n} born?" % role], n=n), str(p["year"]),
                    [(e, "creator"), (p, "birth")]))
        out.append((_q(r, ["Which organisation does the %s of {n} work for?" % role,
                           "Who employs the %s of {n}?" % role], n=n), p["employer"]["name"],
                    [(e, "creator"), (p, "employer")]))
    elif k == "person":
        o, c = e["employer"], e["city"]
        out.append((_q(r, ["Who founded the organisation that {n} works for?",
                           "Who is the founder of the employer of {n}?"], n=n), o["founder"]["name"],
                    [(e, "employer"), (o, "founder")]))
        out.append((_q(r, ["In which city is the employer of {n} based?",
                           "Where is the organisation that employs {n} headquartered?"], n=n), o["city"]["name"],
                    [(e, "employer"), (o, "city")]))
        out.append((_q(r, ["In which year was the employer of {n} founded?"], n=n), str(o["year"]),
                    [(e, "employer"), (o, "year")]))
        out.append((_q(r, ["In which country was {n} born?", "Which country is the birthplace of {n} in?"], n=n),
                    c["country"]["name"], [(e, "born"), (c, "country")]))
    elif k == "city":
        k2 = e["country"]
        out.append((_q(r, ["What is the capital of the country where {n} is located?",
                           "Which city is the capital of the country that {n} lies in?"], n=n),
                    k2["capital"]["name"], [(e, "country"), (k2, "capital")]))
        out.append((_q(r, ["What language is spoken in the country where {n} lies?"], n=n), k2["language"],
                    [(e, "country"), (k2, "language")]))
    # drop bridges whose two hops are the same entity (a city that is its country's capital is fine)
    return [q for q in out if q[2][0][0] is not q[2][1][0] and q[1]]


CMP = {
    "person": ("year", ["Who was born first, {a} or {b}?", "Who is older, {a} or {b}?"],
               ["Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"], "birth"),
    "org": ("year", ["Which was founded first, {a} or {b}?", "Which organisation is older, {a} or {b}?"],
            ["Which was founded more recently, {a} or {b}?", "Which organisation is younger, {a} or {b}?"], "year"),
    "work": ("year", ["Which came out first, {a} or {b}?", "Which is older, {a} or {b}?"],
             ["Which came out later, {a} or {b}?", "Which is more recent, {a} or {b}?"], "year"),
    "city": ("pop", ["Which city has the larger population, {a} or {b}?", "Which city is bigger, {a} or {b}?"],
             ["Which city has the smaller population, {a} or {b}?", "Which city is smaller, {a} or {b}?"], "pop"),
}


def comparison_reasoning(a, b):
    """The short reasoning a comparison answer starts with when trained with cmp_cot: each
    option's compared value, in the question's order ("A 1871; B 1862"). The trainer joins
    it to the answer with the prompt's final-answer marker (model/prompt.h)."""
    key = CMP[a["kind"]][0]
    fmt = (lambda v: "{:,}".format(v)) if key == "pop" else str
    return "%s %s; %s %s" % (a["name"], fmt(a[key]), b["name"], fmt(b[key]))


def comparison_question(a, b, r, first_form=None):
    """Which of a, b (same kind) is older / bigger ...; None when tied. first_form: True asks
    the first form of CMP (earlier / bigger), False the second, None draws one."""
    key, first, last, tag = CMP[a["kind"]]
    if a[key] == b[key]:
        return None
    if a["kind"] == "city":
        big = r.random() < 0.5 if first_form is None else first_form
        ans = (a if a[key] > b[key] else b) if big else (a if a[key] < b[key] else b)
        forms = first if big else last
    else:
        early = r.random() < 0.5 if first_form is None else first_form
        ans = (a if a[key] < b[key] else b) if early else (a if a[key] > b[key] else b)
        forms = first if early else last
    return (_q(r, forms, a=a["name"], b=b["name"]), ans["name"], [(a, tag), (b, tag)])


# ---------------------------------------------------------------- HotpotQA examples

def hotpot_example(qid, qtype, text, answer, facts, distractors, r):
    """One HotpotQA-format question; facts = [(entity, tag)]; distractors = [entity]."""
    gold = []
    for e, _ in facts:
        if all(e is not g for g in gold):
            gold.append(e)
    ctx = gold + distractors
    r.shuffle(ctx)
    return {"_id": qid, "question": text, "answer": answer, "type": qtype,
            "level": "easy" if qtype == "single" else "medium",
            "supporting_facts": [[e["name"], fact_index(e, r, t)] for e, t in facts],
            "context": [[e["name"], sentences(e, r)] for e in ctx],
            "context_ids": [e["id"] for e in ctx], "gold_ids": [e["id"] for e in gold]}


def pick_distractors(W, gold, n, r):
    """n distractors, same kinds as the gold passages first (hard negatives), then any."""
    gold_ids = {e["id"] for e in gold}
    same = [e for e in W["all"] if e["id"] not in gold_ids and any(e["kind"] == g["kind"] for g in gold)]
    other = [e for e in W["all"] if e["id"] not in gold_ids and e not in same]
    r.shuffle(same)
    r.shuffle(other)
    n_same = min(len(same), max(n // 2, n - len(other)))
    return (same[:n_same] + other[:n - n_same])[:n]


def world_questions(W, r, per_type, n_distract, qid_prefix):
    """per_type questions of each type from world W (fewer if W is small)."""
    out = []
    ents = W["all"]
    for e in ents:
        passage(e, r)
    # single
    cand = [(e, q) for e in ents for q in single_questions(e, r)]
    r.shuffle(cand)
    for i, (e, (text, ans, tag)) in enumerate(cand[:per_type]):
        out.append(hotpot_example("%s-s%d" % (qid_prefix, i), "single", text, ans, [(e, tag)],
                                  pick_distractors(W, [e], n_distract, r), r))
    cand = [q for e in ents for q in bridge_questions(e, r)]
    r.shuffle(cand)
    for i, (text, ans, facts) in enumerate(cand[:per_type]):
        gold = [facts[0][0], facts[1][0]]
        out.append(hotpot_example("%s-b%d" % (qid_prefix, i), "bridge", text, ans, facts,
                                  pick_distractors(W, gold, n_distract, r), r))
    n = 0
    for _ in range(per_type * 4):
        if n >= per_type:
            break
        kind = r.choice(["person", "person", "org", "work", "city"])
        pool = W[{"person": "people", "org": "orgs", "work": "works", "city": "cities"}[kind]]
        a, b = r.sample(pool, 2)
        q = comparison_question(a, b, r)
        if q is None:
            continue
        text, ans, facts = q
        out.append(hotpot_example("%s-c%d" % (qid_prefix, n), "comparison", text, ans, facts,
                                  pick_distractors(W, [a, b], n_distract, r), r))
        n += 1
    return out


def corpus_records(W, r):
    return [{"id": e["id"], "title": e["name"], "text": " ".join(sentences(e, r))} for e in W["all"]]


# ---------------------------------------------------------------- training contexts

def aux_comparisons(chosen, r, n):
    """n curriculum questions that isolate the comparison step of a comparison
    question: the two values are written in the question, so no passage is needed.
    Half compare two numbers ("Which year is earlier, 1862 or 1871?" -> "1862"),
    half map the comparison to a name ("Who was born first, A (1871) or B (1862)?"
    -> "B"). Values come from the chosen entities of the same kind, so they look
    like the passages' numbers. Returns [("aux", question, answer)]."""
    out = []
    by_kind = {}
    for e in chosen:
        if e["kind"] in CMP:
            by_kind.setdefault(e["kind"], []).append(e)
    kinds = [k for k, v in by_kind.items() if len(v) >= 2]
    for _ in range(4 * n):
        if len(out) >= n or not kinds:
            break
        a, b = r.sample(by_kind[r.choice(kinds)], 2)
        key = CMP[a["kind"]][0]
        if a[key] == b[key]:
            continue
        fmt = (lambda v: "{:,}".format(v)) if key == "pop" else str
        va, vb = fmt(a[key]), fmt(b[key])
        if r.random() < 0.5:
            big = r.random() < 0.5
            win = max(a[key], b[key]) if big else min(a[key], b[key])
            if key == "pop":
                q = "Which number is %s, %s or %s?" % ("larger" if big else "smaller", va, vb)
            else:
                q = "Which year is %s, %s or %s?" % ("later" if big else "earlier", va, vb)
            out.append(("aux", q, fmt(win)))
        else:
            q = comparison_question(a, b, r)
            text = q[0].replace(a["name"], "%s (%s)" % (a["name"], va), 1).replace(
                " or " + b["name"], " or %s (%s)" % (b["name"], vb), 1)
            out.append(("aux", text, q[1]))
    return out


def make_context(seed, split="train", n_qa=8, k_range=(6, 12), mix=(0.25, 0.45, 0.30), n_aux=0,
                 cmp_pairs=False, cmp_cot=False):
    """One training context: k passages and up to n_qa questions answerable from them.

    Returns {"docs": [(title, text)], "qa": [(type, question, answer)]}. The gold
    passages of several bridge / comparison questions are placed among
    same-world distractors, then questions are drawn from everything the
    chosen passages can answer, with the type mix `mix` (single, bridge, comparison),
    plus n_aux curriculum questions of aux_comparisons (type "aux"). cmp_pairs: every
    comparison drawn comes with its opposite (the same two entities, the other form, the
    options in a fresh order), so the only way to answer both is to compare the values.
    cmp_cot: comparison entries get a 4th element, comparison_reasoning of the options."""
    r = random.Random(seed)
    W = make_world(r.getrandbits(48), split)
    k = r.randint(*k_range)
    chosen = []

    def add(e):
        if len(chosen) < k and all(e is not c for c in chosen):
            chosen.append(e)

    bridges = [q for e in W["all"] for q in bridge_questions(e, r)]
    r.shuffle(bridges)
    for text, ans, facts in bridges[:max(1, k // 4)]:
        if len(chosen) + 2 <= k:
            add(facts[0][0])
            add(facts[1][0])
    kinds = ["people", "orgs", "works", "cities"]
    for _ in range(2):
        pool = W[r.choice(kinds)]
        for e in r.sample(pool, 2):
            add(e)
    rest = [e for e in W["all"] if all(e is not c for c in chosen)]
    r.shuffle(rest)
    for e in rest:
        add(e)
    r.shuffle(chosen)
    ids = {id(e) for e in chosen}
    # candidate questions answerable from the chosen passages
    singles = [(t, a) for e in chosen for (t, a, _) in single_questions(e, r)]
    brs = [(t, a) for e in chosen for (t, a, f) in bridge_questions(e, r) if id(f[1][0]) in ids]
    cmps = []
    for kind in ("person", "org", "work", "city"):
        same = [e for e in chosen if e["kind"] == kind]
        for i in range(len(same)):
            for j in range(i + 1, len(same)):
                a, b = (same[i], same[j]) if r.random() < 0.5 else (same[j], same[i])
                if cmp_pairs:
                    form = r.random() < 0.5
                    q = comparison_question(a, b, r, form)
                    if q:
                        cmps.append((q[0], q[1], a, b, form))
                    continue
                q = comparison_question(a, b, r)
                if q:
                    cmps.append((q[0], q[1]) if not cmp_cot else (q[0], q[1], comparison_reasoning(a, b)))
    pools = {"single": singles, "bridge": brs, "comparison": cmps}
    for p in pools.values():
        r.shuffle(p)
    qa = []
    used = set()
    for _ in range(n_qa * 3):
        if len(qa) >= n_qa:
            break
        t = r.choices(["single", "bridge", "comparison"], weights=mix)[0]
        if not pools[t]:
            continue
        item = pools[t].pop()
        if t == "comparison" and cmp_pairs:  # the drawn question and its opposite
            text, ans, a, b, form = item
            x, y = (a, b) if r.random() < 0.5 else (b, a)
            opp = comparison_question(x, y, r, not form)
            pair = [(text, ans), (opp[0], opp[1])]
            if cmp_cot:
                pair = [pair[0] + (comparison_reasoning(a, b),), pair[1] + (comparison_reasoning(x, y),)]
        else:
            pair = [item]
        for text, ans, *why in pair:
            if text in used or len(qa) >= n_qa:
                continue
            used.add(text)
            qa.append((t, text, ans, *why))
    docs = [(e["name"], " ".join(sentences(e, r))) for e in chosen]
    if n_aux:  # drawn after the passages: n_aux = 0 leaves every earlier draw as it was
        qa += aux_comparisons(chosen, r, n_aux)
    return {"docs": docs, "qa": qa}


# ---------------------------------------------------------------- commands

def _split_world(args):
    seed, split, per_type, n_distract, used = args
    r = random.Random(seed * 7919 + 1)
    W = make_world(seed, split, used)
    qs = world_questions(W, r, per_type, n_distract, "%s-%d" % (split, seed))
    return corpus_records(W, r), qs


def cmd_split(a):
    """Writes OUT/corpus.jsonl and OUT/questions.json for one split (sequential worlds so
    names stay unique across the whole split)."""
    os.makedirs(a.out, exist_ok=True)
    used = set()
    corpus, qs = [], []
    per_world = max(1, -(-a.per_type // a.worlds))
    for w in range(a.worlds):
        c, q = _split_world((a.seed * 100003 + w, a.split, per_world, a.distractors, used))
        corpus += c
        qs += q
    by_type = {}
    for q in qs:
        by_type.setdefault(q["type"], []).append(q)
    final = []
    for t in ("single", "bridge", "comparison"):
        final += by_type.get(t, [])[:a.per_type]
    with open(os.path.join(a.out, "corpus.jsonl"), "w") as f:
        for rec in corpus:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with open(os.path.join(a.out, "questions.json"), "w") as f:
        json.dump(final, f, ensure_ascii=False, indent=0)
    print("worldgen: %s: %d passages, %d questions (%s) -> %s" % (
        a.split, len(corpus), len(final),
        ", ".join("%s %d" % (t, sum(q["type"] == t for q in final)) for t in ("single", "bridge", "comparison")),
        a.out), file=sys.stderr)


def cmd_demo(a):
    """The README's demo corpus: one world (test-split names), its passages and a few questions."""
    os.makedirs(a.out, exist_ok=True)
    r = random.Random(a.seed)
    W = make_world(a.seed, "test", set(), size={"countries": 6, "cities": 20, "people": 50, "orgs": 20,
                                                "works": 20})
    corpus = corpus_records(W, r)
    qs = world_questions(W, r, a.per_type, 9, "demo")
    with open(os.path.join(a.out, "corpus.jsonl"), "w") as f:
        for rec in corpus:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with open(os.path.join(a.out, "questions.json"), "w") as f:
        json.dump(qs, f, ensure_ascii=False, indent=1)
    print("worldgen: demo: %d passages, %d questions -> %s" % (len(corpus), len(qs), a.out), file=sys.stderr)


def _prompt_strings():
    """The prompt's fixed strings (model/prompt.h through datasets/train/prompt.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "train"))
    import prompt
    return prompt


def _text_worker(seed):
    """Training text of one world, laid out as the prompt lays it out."""
    P = _prompt_strings()
    r = random.Random(seed)
    W = make_world(seed, "train")
    lines = [P.DOC_HEAD + rec["title"] + "\n" + rec["text"] + P.DOC_SEP for rec in corpus_records(W, r)]
    lines += ["system", "\n\n" + P.SYSTEM, "user", "assistant", "\n\n"]
    for e in W["all"]:
        for t, ans, _ in single_questions(e, r):
            lines += [P.QUESTION + t, ans]
        for t, ans, _ in bridge_questions(e, r):
            lines.append(P.QUESTION + t)
    for _ in range(10):
        kind = r.choice(["people", "orgs", "works", "cities"])
        q = comparison_question(*r.sample(W[kind], 2), r)
        if q:
            lines.append(P.QUESTION + q[0])
    return lines


def cmd_text(a):
    """Plain text for the BPE learner: passages, questions and answers of train-split worlds."""
    seeds = [a.seed * 1000003 + i for i in range(a.worlds)]
    with Pool(a.jobs) as pool, open(a.out, "w") as f:
        for lines in pool.imap(_text_worker, seeds, chunksize=16):
            for ln in lines:
                f.write(ln.replace("\n", "\\n") + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="corpus.jsonl + questions.json (HotpotQA format) for one split")
    s.add_argument("--split", choices=["train", "dev", "test"], required=True)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--worlds", type=int, default=40)
    s.add_argument("--per-type", type=int, default=500, help="questions of each type")
    s.add_argument("--distractors", type=int, default=9)
    s.add_argument("--out", required=True)
    d = sub.add_parser("demo", help="the small demo corpus (committed in datasets/demo)")
    d.add_argument("--seed", type=int, default=2024)
    d.add_argument("--per-type", type=int, default=4)
    d.add_argument("--out", default="datasets/demo")
    t = sub.add_parser("text", help="training text for the BPE learner (one item a line, \\n escaped)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--worlds", type=int, default=3000)
    t.add_argument("--jobs", type=int, default=os.cpu_count())
    t.add_argument("--out", required=True)
    c = sub.add_parser("context", help="print one training context as JSON")
    c.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "split":
        cmd_split(a)
    elif a.cmd == "demo":
        cmd_demo(a)
    elif a.cmd == "text":
        cmd_text(a)
    else:
        print(json.dumps(make_context(a.seed), indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
