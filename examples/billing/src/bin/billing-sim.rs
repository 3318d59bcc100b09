//! `billing-sim`: the simulator's every command (`sweep`, `replay`, `shrink`, `list`, `mutants`,
//! `bench`) for the billing receiver and its planted bugs. Everything it runs is in `billing::app`;
//! this file must stay the one line that hands it the command line.

fn main() {
    billing::app().main()
}
