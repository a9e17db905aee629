//! One module per subcommand.

pub mod campaigns;
pub mod demo;
pub mod generate;
pub mod produce;
pub mod run;
