package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCurrent fails when THIRD_PARTY_LICENSES no longer matches the modules
// cmd/k3 links (a dependency added, removed or upgraded without
// regenerating it).
func TestCurrent(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, Out))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is out of date: run go run ./tools/licenses", Out)
	}
	for _, s := range []string{"github.com/hashicorp/go-plugin v1.8.0", "Go standard library", "NOTICE.txt (NOTICE)"} {
		if !bytes.Contains(have, []byte(s)) {
			t.Errorf("%s lacks %q", Out, s)
		}
	}
	if bytes.Contains(have, []byte("(license: unknown)")) {
		t.Errorf("%s has a license nobody identified; read it and teach Identify", Out)
	}
}

func TestIdentify(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"MIT License\n\nPermission is hereby granted, free of charge, to any person", "MIT"},
		{"Apache License\n   Version 2.0, January 2004", "Apache-2.0"},
		{"Mozilla Public License, version 2.0", "MPL-2.0"},
		{"Redistribution and use in source and binary forms ... Neither the name of Google", "BSD-3-Clause"},
		{"Redistribution and use in source and binary forms, with or without", "BSD-2-Clause"},
		{"Apache License Version 2.0 ... MIT ... Permission is hereby granted, free of charge", "MIT AND Apache-2.0"},
		{"all rights reserved", "unknown"},
	} {
		if got := Identify(tc.text); got != tc.want {
			t.Errorf("Identify(%.30q) = %s, want %s", tc.text, got, tc.want)
		}
	}
}
