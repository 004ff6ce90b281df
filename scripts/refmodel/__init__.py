"""Helpers of scripts/train_reference_model.py and scripts/analyze_reference_model.py: the corpus
and its book split, the tokenizer (the format contract the C++ runner reads), the training data
order, the loss-curve picture. Plain Python plus numpy; torch only where a module says so."""
