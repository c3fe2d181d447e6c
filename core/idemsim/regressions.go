package idemsim

// regressionSeeds always run, before the budget's seeds: each once found
// an invariant violation (the comment says which, and what fixed it).
var regressionSeeds = []uint64{}
