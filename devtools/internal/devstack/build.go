package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// FindRepo returns the module's root: the nearest directory upwards from
// the working directory with a go.mod.
func FindRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod here or above: run the harness from the repository")
		}
		dir = parent
	}
}

// Build builds the packages pkgs (import paths relative to repo, such as
// ./cmd/worker) into the directory out with the go command ($GO, else
// go), run in repo. A failed build's error holds the compiler's output.
func Build(ctx context.Context, repo, out string, pkgs ...string) error {
	args := append([]string{"build", "-o", out + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

// goTool is the go command: $GO, else go.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
