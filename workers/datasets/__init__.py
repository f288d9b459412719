"""Real data: prepared token datasets (flat binary shards and their index),
the tokenizer a dataset records, small text datasets read directly, and the
preparation that makes token datasets on Ray.

- `index`: the format of a prepared dataset (torch- and numpy-free: the API
  reads it at submit);
- `tokenizer`: a dataset's Hugging Face `tokenizers` JSON file;
- `checks`: what the service refuses at submit (vocabulary, missing or
  mis-sized shards, a tokenizer that does not parse);
- `token_shards`: samples as ranged reads of the shards;
- `text`: jsonl or parquet documents, tokenized as read;
- `prepare`: `brigade data prepare` on Ray tasks.
"""
