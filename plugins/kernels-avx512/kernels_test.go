package kernelsavx512

import (
	"os"
	"strconv"
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

// The suite every kernel plugin runs; plugins/internal/kernelkit/kerneltest
// says what each test checks.

func TestMain(m *testing.M) { kerneltest.Main(m, kit) }

func TestLevels(t *testing.T)            { kerneltest.Levels(t, kit) }
func TestDotRandom(t *testing.T)         { kerneltest.DotRandom(t, kit) }
func TestDotIntegerExact(t *testing.T)   { kerneltest.DotIntegerExact(t, kit) }
func TestDotEdges(t *testing.T)          { kerneltest.DotEdges(t, kit) }
func TestQuantizeQ8K(t *testing.T)       { kerneltest.QuantizeQ8K(t, kit) }
func TestMatMul(t *testing.T)            { kerneltest.MatMul(t, kit) }
func TestMatMulRandom(t *testing.T)      { kerneltest.MatMulRandom(t, kit) }
func TestMatMulErrors(t *testing.T)      { kerneltest.MatMulErrors(t, kit) }
func TestPluginExecute(t *testing.T)     { kerneltest.PluginExecute(t, kit) }
func TestPluginRejects(t *testing.T)     { kerneltest.PluginRejects(t, kit) }
func TestPluginLevelEnv(t *testing.T)    { kerneltest.PluginLevelEnv(t, kit) }
func TestRowLengths(t *testing.T)        { kerneltest.RowLengths(t, kit) }
func TestDotFloatBoundary(t *testing.T)  { kerneltest.DotFloatBoundary(t, kit) }
func TestFastFloat(t *testing.T)         { kerneltest.FastFloat(t, kit) }
func TestFastFloatAccuracy(t *testing.T) { kerneltest.FastFloatAccuracy(t, kit) }

func BenchmarkMatVec(b *testing.B)      { kerneltest.BenchMatVec(b, kit) }
func BenchmarkQuantizeQ8K(b *testing.B) { kerneltest.BenchQuantizeQ8K(b, kit) }
func BenchmarkDot(b *testing.B)         { kerneltest.BenchDot(b, kit) }
func BenchmarkMatMul(b *testing.B)      { kerneltest.BenchMatMul(b, kit) }
func BenchmarkSideBySide(b *testing.B)  { kerneltest.BenchSideBySide(b, kit) }

// TestLevelTable prints the level comparison behind preferred() when
// K3_LEVEL_TABLE is set (a repetition count): of the K-quants, or with
// K3_LEVEL_TYPES=iq of the grid types.
func TestLevelTable(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("K3_LEVEL_TABLE"))
	if reps <= 0 {
		t.Skip("set K3_LEVEL_TABLE=N to print the level table (N repetitions, best-of)")
	}
	set := os.Getenv("K3_LEVEL_TYPES")
	if set == "" {
		set = "k"
	}
	types, ok := kerneltest.LevelTypes[set]
	if !ok {
		t.Fatalf("K3_LEVEL_TYPES=%q: want k or iq", set)
	}
	kerneltest.LevelTable(t, kit, reps, types)
}
