"""The verifier's role and unit checks (services/cache/structure.py, units.py): the same words in
swapped slots, or the same number in another unit, is another question; a paraphrase that moves a
phrase, changes the voice, or joins two things symmetrically is the same one."""

from __future__ import annotations

import time

import pytest

from services.cache.lexicon import wordnet
from services.cache.structure import Roles
from services.cache.units import mentions, units_differ
from services.cache.verify import Verifier, numbers

V = Verifier()


def verdict(old: str, new: str, similarity: float = 0.97) -> str:
    """ "ok" or the verifier's reason, for the cached `old` and the incoming `new`."""
    v = V.check(new, old, similarity)
    return "ok" if v.ok else v.reason


# Issue #35's false hits, and more of the same: each pair must be refused, both ways round.
SWAPS = [
    ("Subtract 17 from 45.", "Subtract 45 from 17."),
    (
        "Write a cover letter for a nurse applying to become a teacher.",
        "Write a cover letter for a teacher applying to become a nurse.",
    ),
    ("Is a mile longer than a kilometre?", "Is a kilometre longer than a mile?"),
    ("Is a mile longer than a km?", "Is a kilometre longer than a mile?"),
    (
        "Write a story where the dragon rescues the knight.",
        "Write a story where the knight rescues the dragon.",
    ),
    (
        "Alice's salary is higher than Bob's. Who earns more?",
        "Bob's salary is higher than Alice's. Who earns more?",
    ),
    (
        "Flights from Paris to Rome on Monday and to Berlin on Friday",
        "Flights from Paris to Rome on Friday and to Berlin on Monday",
    ),
    ("Flights from Paris to Rome", "Flights to Paris from Rome"),
    ("Subtract 17 from 45", "From 17, subtract 45"),
    ("Divide 10 by 2", "Divide 2 by 10"),
    ("What is 37-58?", "What is 58-37?"),
    ("What is 2 to the power of 10?", "What is 10 to the power of 2?"),
    ("Is 7 greater than 3?", "Is 3 greater than 7?"),
    ("Convert Celsius to Fahrenheit", "Convert Fahrenheit to Celsius"),
    ("Translate 'good morning' from English to French", "Translate 'good morning' from French to English"),
    ("Does Alice owe Bob money?", "Does Bob owe Alice money?"),
    ("Can a UK citizen work in the US?", "Can a US citizen work in the UK?"),  # US is not "us"
    # Pronouns fill roles too; "fare" is not "far" (how far is symmetric).
    ("My flatmate owes me £200, how do I get it back?", "I owe my flatmate £200, how do I get it back?"),
    ("Can I bring my child to work?", "Can my child bring me to work?"),
    ("What's the train fare from Leeds to York?", "How much is a train ticket York to Leeds?"),
    # The second word's own modifiers are not part of the link.
    ("Can a credit card pay off a personal loan?", "Can a personal loan pay off a credit card?"),
    # Names of several words: the rest of a name is not what links two names.
    ("Does Tesco accept Apple Pay?", "Does Apple Pay accept Tesco?"),
    ("Is New York bigger than Los Angeles?", "Is Los Angeles bigger than New York?"),
    ("Who is Alice's brother's wife?", "Who is Alice's wife's brother?"),
    ("Is Alice Bob's mother?", "Is Bob Alice's mother?"),
    ("What is the ratio of boys to girls?", "What is the ratio of girls to boys?"),
    ("Do cats chase dogs?", "Do dogs chase cats?"),
    ("Is London north of Paris?", "Is Paris north of London?"),
    ("Does milk go in before tea?", "Does tea go in before milk?"),
    ("Replace butter with oil", "Replace oil with butter"),
    ("Put the cup on the table", "Put the table on the cup"),
    ("Is the teacher a nurse?", "Is the nurse a teacher?"),
    ("Alice gave a book to Bob", "Bob gave a book to Alice"),
    ("How much faster is Python vs Java?", "How much faster is Java vs Python?"),
    # The voice changes and the roles with it: the passive is read as active first.
    ("The knight is rescued by the dragon.", "The knight rescues the dragon."),
    ("Was Hamlet written by Shakespeare?", "Did Hamlet write Shakespeare?"),
    # Named entities reordered, each without its own preposition.
    (
        "How do I transfer my ISA from Hargreaves Lansdown to Vanguard?",
        "How do I move my Vanguard ISA over to Hargreaves Lansdown?",
    ),
]

# Changed units or scale with the same numbers.
UNIT_CHANGES = [
    ("Convert 100 megabits per second to GB per hour.", "Convert 100 megabytes per second to GB per hour."),
    ("How long to download 5 GB at 100 Mbps?", "How long to download 5 GB at 100 MBps?"),
    ("Is 100 Mb enough?", "Is 100 MB enough?"),
    ("Is a 2 TB drive enough?", "Is a 2 TiB drive enough?"),
    ("Is 10 mW enough?", "Is 10 MW enough?"),
    ("Does a 5 ms delay matter?", "Does a 5 µs delay matter?"),
    ("Is 30°C hot?", "Is 30°F hot?"),
    ("Is 30 degrees Celsius hot?", "Is 30 kelvin hot?"),
    ("Take 10 mg of zinc?", "Take 10 mcg of zinc?"),
    ("Is 5 kg heavy for a cat?", "Is 5 lb heavy for a cat?"),
    ("Is 5 oz of wine a lot?", "Is 5 fl oz of wine a lot?"),
    ("Is 2 litres of water a day enough?", "Is 2 gallons of water a day enough?"),
    ("Is 5 km/h fast?", "Is 5 m/s fast?"),
    ("Is 60 mph fast?", "Is 60 km/h fast?"),
    ("Is a 3 GHz CPU fast?", "Is a 3 MHz CPU fast?"),
    ("Is a 2 kW heater enough?", "Is a 2 W heater enough?"),
    ("Rates rose by 5 percent", "Rates rose by 5 percentage points"),
    ("Is $5 a good tip?", "Is €5 a good tip?"),
    ("Convert 100 USD to EUR", "Convert 100 CAD to EUR"),
    ("Is a 50k salary good?", "Is a 50 million salary good?"),
    ("How far is 5 miles?", "How far is 5 km?"),
    ("Walk 5 minutes or 5 hours?", "Walk 5 hours or 5 days?"),
    # The same numbers bound to other units.
    ("Convert 5 km to miles", "Convert 5 miles to km"),
    ("How much is 50 euros in dollars?", "Convert $50 to EUR"),
]

# Paraphrases and symmetric forms: each must still pass, both ways round.
SAME = [
    ("How do I cancel my Amazon order?", "cancel an order on Amazon, how?"),
    ("The knight is rescued by the dragon.", "The dragon rescues the knight."),
    ("Was Hamlet written by Shakespeare?", "Did Shakespeare write Hamlet?"),
    ("Who painted the Mona Lisa?", "The Mona Lisa was painted by whom?"),
    (
        "What is the difference between a crocodile and an alligator?",
        "What is the difference between an alligator and a crocodile?",
    ),
    (
        "What's the difference between baking soda and baking powder?",
        "What's the difference between baking powder and baking soda?",
    ),
    ("What is the sum of 17 and 86?", "What is the sum of 86 and 17?"),
    ("What is 37+58?", "What is 58+37?"),
    ("What is 6 times 7?", "What is 7 times 6?"),
    ("Is a tomato a fruit or a vegetable?", "Is a tomato a vegetable or a fruit?"),
    ("Which is bigger, a mile or a kilometre?", "Which is bigger, a kilometre or a mile?"),
    ("Python vs Java: which is faster?", "Java vs Python: which is faster?"),
    ("Compare Python with Java", "Compare Java with Python"),
    ("Is 5 GiB the same as 5 GB?", "Is 5 GB the same as 5 GiB?"),
    ("Is Alice as tall as Bob?", "Is Bob as tall as Alice?"),
    ("Alice and Bob are married, right?", "Bob and Alice are married, right?"),
    ("How far is Madrid from Barcelona?", "How far is Barcelona from Madrid?"),
    ("Flights from Paris to Rome", "Flights to Rome from Paris"),
    ("What time does the Tesco in Leeds close on Sunday?", "On Sunday, when does the Leeds Tesco close?"),
    ("Subtract 17 from 45", "From 45, subtract 17"),
    (
        "Best way to get from the airport to the city centre?",
        "Best way to get to the city centre from the airport?",
    ),
    ("Shipping from China to the US takes how long?", "How long does shipping to the US from China take?"),
    ("In 2020, who won the Euros?", "Who won the Euros in 2020?"),
    ("What's the capital of Australia?", "Which city is Australia's capital?"),
    ("How do I reset my password?", "Password reset: how?"),
    (
        "I ordered a jacket online and want to return it, what do I do?",
        "I want to return a jacket I ordered online, what do I do?",
    ),
    ("How many times a day does a parrot need feeding?", "How often a day should I feed my parrot?"),
    ("Can my boss make me work on a bank holiday?", "Can I be made to work on a bank holiday by my boss?"),
    ("Can they charge me for a late return?", "Can I be charged for a late return?"),
    # Units in another spelling.
    ("Convert 5 km to miles", "Convert 5 kilometres to miles"),
    ("What is 20 degrees Celsius in Fahrenheit?", "What is 20 °C in °F?"),
    ("What is 500 MB in GB?", "How many GB is 500 megabytes?"),
    ("How fast is 100 mbps?", "How fast is 100 Mbps?"),
    ("How fast is 100 megabits per second?", "How fast is 100 Mbps?"),
    ("What is 5 feet in cm?", "How many centimetres are in 5 ft?"),
    ("How many cm are in a foot?", "What is a foot in cm?"),
    ("How many grams in 2 pounds?", "What is 2 lb in grams?"),
    ("How much is 50 euros in dollars?", "Convert €50 to USD"),
    ("Convert 100 USD to GBP", "How many pounds is 100 dollars?"),
    ("Is $5 a good tip?", "Is 5 USD a good tip?"),
    ("Is 100°F a fever?", "Is 100 degrees Fahrenheit a fever?"),
    ("What is 5 million in scientific notation?", "What is 5m in scientific notation?"),
    ("How many days of annual leave do I get?", "How long is my annual leave?"),
]


# Another day, with the same words and numbers.
TIME_CHANGES = [
    (
        "What's the weather forecast for Madrid this weekend?",
        "What's the weather forecast for Madrid next weekend?",
    ),
    ("Book a dentist appointment for tomorrow.", "Book a dentist appointment for the day after tomorrow."),
    ("Remind me to call the bank this evening.", "Remind me to call the bank tomorrow evening."),
    ("Are there flights to Delhi on Diwali?", "Are there flights to Delhi on the day before Diwali?"),
    ("Who is on call this week?", "Who is on call last week?"),
    ("What did I spend last month?", "What did I spend this coming month?"),
    ("Was the payment made 2 weeks ago?", "Will the payment be made in 2 weeks?"),
]
SAME_TIME = [
    ("What's the weather in Paris tomorrow?", "What's tomorrow's forecast for Paris?"),
    ("What's on at the cinema tonight?", "What's on at the cinema this evening?"),
    ("Who is on call this weekend?", "Who is on call at the weekend?"),
    ("Any gigs in Leeds next week?", "Any gigs in Leeds the following week?"),
    ("Why is my bill higher this month?", "Why is my bill higher this month than last month?"),
    ("When is the deadline to drop a class?", "What's the last day I can drop a class?"),
]


@pytest.mark.parametrize(("old", "new"), TIME_CHANGES)
def test_another_day_is_refused_both_ways(old: str, new: str) -> None:
    assert verdict(old, new, 0.99).startswith("time:")
    assert verdict(new, old, 0.99).startswith("time:")


@pytest.mark.parametrize(("old", "new"), SAME_TIME)
def test_the_same_day_in_other_words_passes(old: str, new: str) -> None:
    assert not verdict(old, new, 0.99).startswith("time:")
    assert not verdict(new, old, 0.99).startswith("time:")


@pytest.mark.parametrize(("old", "new"), SWAPS)
def test_swapped_roles_are_refused_both_ways(old: str, new: str) -> None:
    assert verdict(old, new, 0.99) == "order"
    assert verdict(new, old, 0.99) == "order"


@pytest.mark.parametrize(("old", "new"), UNIT_CHANGES)
def test_changed_units_are_refused_both_ways(old: str, new: str) -> None:
    assert verdict(old, new, 0.99).startswith("units:")
    assert verdict(new, old, 0.99).startswith("units:")


@pytest.mark.parametrize(("old", "new"), SAME)
def test_paraphrases_and_symmetric_forms_pass_both_ways(old: str, new: str) -> None:
    assert verdict(old, new, 0.99) == "ok"
    assert verdict(new, old, 0.99) == "ok"


def test_units_read_as_roles_are_refused_too() -> None:
    # "a foot" is not counted as a unit (a foot is also a body part), so the units differ first.
    assert verdict("How many feet are in a mile?", "How many miles are in a foot?").startswith("units:")
    assert verdict("How many feet are in a mile?", "How many miles are in one foot?") == "numbers"


def test_unit_spellings_scales_and_case_conventions() -> None:
    def units(text: str) -> list[tuple[str, str]]:
        return [(m.key, m.quantity) for m in mentions(text)]

    assert units("100 megabits per second") == units("100 Mbps") == [("Mb", "100"), ("/s", "")]
    assert units("100 MBps") == units("100 MB/s") == [("MB", "100"), ("/s", "")]
    assert units("60 miles an hour") == [("mi", "60"), ("/h", "")]
    assert units("a two-year fix") == [("year", "2")] and units("a 5-minute walk") == [("min", "5")]
    # Ambiguous spellings are every unit they may be: "mb" and "MBPS" say nothing of bits or bytes.
    assert units("100 mb") == [("MB|Mb", "100")] and units("5m") == [("e6|m|min", "5")]
    assert units_differ("100 mb", "100 MB") == units_differ("100 mb", "100 Mb") == ""
    assert units_differ("100 Mb", "100 MB") == "MB/Mb"
    # Words and letters that are units only next to a number, and never otherwise.
    assert units("What is ML?") == units("5 A levels") == units("a bit of rain") == units("the 1990s") == []
    assert units("um what is the tallest mountain") == units("Ah, I see") == units("Wait a minute") == []
    assert units("How many days of leave do I get?") == [] and units("What is 5 ML in cups") == [
        ("ml", "5"),
        ("cup", ""),
    ]
    # "5 million" is the number 5 and a magnitude, so 5m agrees and 5 thousand does not.
    assert numbers("5 million") == numbers("5m") == {"5": 1}
    assert units_differ("5 thousand", "5 million") == "e3/e6"


def test_roles_name_the_swapped_words_and_work_without_wordnet() -> None:
    r = Roles(wordnet())
    assert r.swapped("Subtract 45 from 17.", "Subtract 17 from 45.") == "45/17"
    assert r.swapped("Is a kilometre longer than a mile?", "Is a mile longer than a km?") == "km/mi"
    bare = Roles(None)
    assert bare.swapped(
        "Write a story where the knight rescues the dragon.",
        "Write a story where the dragon rescues the knight.",
    )
    assert not bare.swapped("Compare Java with Python", "Compare Python with Java")


def test_the_checks_stay_cheap() -> None:
    """The verifier runs on every semantic candidate: well under a millisecond a pair, even on
    prompts it has not seen (the caches cleared)."""
    from services.cache import clauses, units

    pairs = SWAPS + UNIT_CHANGES + SAME + TIME_CHANGES + SAME_TIME
    V.check("warm", "up", 0.9)
    t0 = time.perf_counter()
    for old, new in pairs:
        units.mentions.cache_clear()
        clauses.cached_tokens.cache_clear()
        V.check(new, old, 0.99)
    per_pair = (time.perf_counter() - t0) / len(pairs)
    assert per_pair < 0.003, f"{per_pair * 1e6:.0f} µs a pair"
