# The two commands of the README:
#   make book   build the book into _build/html (every notebook executed afresh)
#   make test   run every test: unit tests, notebooks (nbval), the book build
# Both create the virtual environment .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: book test lint clean

$(INSTALLED): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m transformer_course.lab_settings
	touch $(INSTALLED)

book: $(INSTALLED)
	$(BIN)/python tools/book_assets.py --dest _vendor
	TRANSFORMER_COURSE_ANSWERS=none $(BIN)/jupyter-book build . --all -W -n --keep-going
	@echo "Open _build/html/index.html"

# Two workers, one notebook file per worker (--dist loadfile keeps a notebook's
# cells together); each worker and kernel uses one thread (see conftest.py).
test: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf _build _vendor
