//! Model evaluation without Python: the datasets a team measures models on (STS pairs, BEIR retrieval
//! folders, labelled texts) and the metrics sentence-transformers, MTEB and trec_eval report on them.
//! Computing the model's outputs is the caller's job (`aleph eval` runs them through the engine).

pub mod datasets;
pub mod metrics;
pub mod retrieval;
