package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
)

// runtimeModel is a model with the two backends a profile picks: its
// weights through the stager, its matrix products through the kernels.
type runtimeModel struct {
	*loadedModel
	kernels engine.Kernels
}

// openRuntime starts the profile's kernels backend and loads f's model on
// it, through the profile's stager (or, with mapped set, on a plain mapping
// of the file). run and serve use it so that every command that runs a
// model runs the way its mode line says.
func openRuntime(ctx context.Context, f *gguf.File, prof *config.Profile, threads int, mapped bool, stderr io.Writer) (*runtimeModel, error) {
	kb, err := engine.OpenKernels(ctx, prof.Kernels, engine.KernelsOptions{Env: kernelsEnv, Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	stageProf := prof
	if mapped {
		stageProf = nil
	}
	lm, err := loadModel(ctx, f, stageProf, model.Options{Threads: threads, Backend: kb}, prof.Context, stderr)
	if err != nil {
		kb.Close()
		return nil, err
	}
	if pk, ok := kb.(*engine.PluginKernels); ok && lm.staged != nil {
		pk.Follow(lm.staged) // a restarted stager maps its regions anew
	}
	fmt.Fprintf(stderr, "k3: kernels=%s\n", kb.Name())
	return &runtimeModel{loadedModel: lm, kernels: kb}, nil
}

// Health is nil while the stager and kernels plugins run, else which of
// them is down or restarting and since when.
func (rm *runtimeModel) Health() error {
	var errs []error
	if rm.staged != nil {
		errs = append(errs, rm.staged.Supervisor().Health().Err())
	}
	if pk, ok := rm.kernels.(*engine.PluginKernels); ok {
		errs = append(errs, pk.Supervisor().Health().Err())
	}
	return errors.Join(errs...)
}

// Close stops the stager, then the kernels.
func (rm *runtimeModel) Close() error {
	return closers{rm.loadedModel, rm.kernels}.Close()
}
