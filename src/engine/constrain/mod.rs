//! Constrained output: grammars that keep sampling inside a JSON schema or a tool call
//! (`grammar`), and each family's tool-calling format (`tools`).

pub mod grammar;
pub mod tools;
