// Package model defines the Model interface and the registry of
// architectures keyed by general.architecture; each architecture lives in a
// sub-package (model/kimik3, ...).
package model
