//! Families not yet on [`crate::backend`]: CLAP's HTSAT audio tower on candle (its CPU twin is
//! `crate::cpu::htsat`).

pub mod clap;
pub(crate) mod clap_fusion;
pub(crate) mod dense;
