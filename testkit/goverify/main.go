// An independent check of the notary's output with the Go reference code (golang.org/x/mod
// sumdb/note and sumdb/tlog), which no one here wrote:
//
//	goverify inclusion VKEYS TLOG_PROOF_FILE LEAF_FILE
//	goverify consistency VKEYS OLD_CHECKPOINT_FILE NEW_CHECKPOINT_FILE PROOF_FILE
//
// VKEYS is one trusted verifier key, or several separated by commas (the keys a log was signed
// with across rotations); each checkpoint must verify under one of them. It prints "ok ..." and
// exits 0, or prints the reason and exits 1.
package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

// openCheckpoint verifies the signed note against the trusted keys and parses its text
// (c2sp.org/tlog-checkpoint: origin, size, base64 root).
func openCheckpoint(vkeys string, signed []byte) (checkpoint, error) {
	var verifiers []note.Verifier
	for _, vkey := range strings.Split(vkeys, ",") {
		verifier, err := note.NewVerifier(vkey)
		if err != nil {
			return checkpoint{}, fmt.Errorf("vkey: %w", err)
		}
		verifiers = append(verifiers, verifier)
	}
	opened, err := note.Open(signed, note.VerifierList(verifiers...))
	if err != nil {
		return checkpoint{}, fmt.Errorf("note: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(opened.Text, "\n"), "\n")
	if len(lines) < 3 {
		return checkpoint{}, errors.New("checkpoint text has fewer than three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return checkpoint{}, fmt.Errorf("checkpoint size %q", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return checkpoint{}, fmt.Errorf("checkpoint root: %w", err)
	}
	if name := opened.Sigs[0].Name; lines[0] != name {
		return checkpoint{}, fmt.Errorf("origin %q is not the key's name %q", lines[0], name)
	}
	return checkpoint{lines[0], size, root}, nil
}

func parseHashes(lines []string) ([]tlog.Hash, error) {
	var hashes []tlog.Hash
	for _, line := range lines {
		h, err := tlog.ParseHash(line)
		if err != nil {
			return nil, fmt.Errorf("proof hash %q: %w", line, err)
		}
		hashes = append(hashes, h)
	}
	return hashes, nil
}

// inclusion checks a c2sp.org/tlog-proof@v1 for the leaf bytes in leafFile.
func inclusion(vkeys, proofFile, leafFile string) error {
	text, err := os.ReadFile(proofFile)
	if err != nil {
		return err
	}
	leaf, err := os.ReadFile(leafFile)
	if err != nil {
		return err
	}
	head, signed, found := strings.Cut(string(text), "\n\n")
	if !found {
		return errors.New("no blank line before the checkpoint")
	}
	lines := strings.Split(head, "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" {
		return fmt.Errorf("header %q", lines[0])
	}
	lines = lines[1:]
	if len(lines) > 0 && strings.HasPrefix(lines[0], "extra ") {
		if _, err := base64.StdEncoding.DecodeString(lines[0][len("extra "):]); err != nil {
			return fmt.Errorf("extra: %w", err)
		}
		lines = lines[1:]
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "index ") {
		return errors.New("no index line")
	}
	index, err := strconv.ParseInt(lines[0][len("index "):], 10, 64)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	proof, err := parseHashes(lines[1:])
	if err != nil {
		return err
	}
	tree, err := openCheckpoint(vkeys, []byte(signed))
	if err != nil {
		return err
	}
	if err := tlog.CheckRecord(proof, tree.size, tree.root, index, tlog.RecordHash(leaf)); err != nil {
		return fmt.Errorf("inclusion: %w", err)
	}
	fmt.Printf("ok inclusion %s size %d index %d\n", tree.origin, tree.size, index)
	return nil
}

// consistency checks that the old checkpoint's tree is a prefix of the new one's.
func consistency(vkeys, oldFile, newFile, proofFile string) error {
	var trees [2]checkpoint
	for i, name := range []string{oldFile, newFile} {
		signed, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		if trees[i], err = openCheckpoint(vkeys, signed); err != nil {
			return err
		}
	}
	text, err := os.ReadFile(proofFile)
	if err != nil {
		return err
	}
	var lines []string
	if trimmed := strings.TrimSpace(string(text)); trimmed != "" {
		lines = strings.Split(trimmed, "\n")
	}
	proof, err := parseHashes(lines)
	if err != nil {
		return err
	}
	old, new := trees[0], trees[1]
	if err := tlog.CheckTree(proof, new.size, new.root, old.size, old.root); err != nil {
		return fmt.Errorf("consistency: %w", err)
	}
	fmt.Printf("ok consistency %s %d -> %d\n", new.origin, old.size, new.size)
	return nil
}

func main() {
	var err error
	switch {
	case len(os.Args) == 5 && os.Args[1] == "inclusion":
		err = inclusion(os.Args[2], os.Args[3], os.Args[4])
	case len(os.Args) == 6 && os.Args[1] == "consistency":
		err = consistency(os.Args[2], os.Args[3], os.Args[4], os.Args[5])
	default:
		err = errors.New("usage: goverify inclusion VKEYS PROOF LEAF | consistency VKEYS OLD NEW PROOF")
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
