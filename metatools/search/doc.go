// Package search ranks tools for meta:search. BM25 is the offline strategy
// (tfidf): BM25F over a tool's name, summary, description, parameters and
// tags, with tokenisation that splits camelCase, snake_case, kebab-case and
// paths, a Porter stemmer, and verb synonyms that map words to intents
// (create, list, get, update, delete, search). Embeddings is the ml strategy:
// cosine similarity of vectors from an OpenAI-compatible embeddings
// endpoint, cached by text. Both return scores in 0..1.
package search
