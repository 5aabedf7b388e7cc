package store

// BoundSteps is boundSteps, for a test migrating its own steps.
var BoundSteps = boundSteps
