// Package config loads hardware profiles (koanf YAML), K3_* environment
// variables and command-line flags, in that order, with strict validation.
package config
