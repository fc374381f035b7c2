// Package tasks holds what each kforge command does, as one ordered list of named steps per
// command, each built in its own file: apply.go, reset.go, prune.go. Reading a command's file
// top to bottom tells its whole story, and listing the names gives `kforge plan`. The steps
// work over one fleet (package fleet: hosts, connections, facts) and share work by calling the
// same functions, not by sharing one object.
package tasks

import (
	"context"
	"fmt"
	"strings"

	"github.com/kforge/kforge/progress"
)

// Scope says where a task does its work.
type Scope string

const (
	OnHosts       Scope = "hosts"       // over SSH, on the hosts listed in Task.Hosts
	OnWorkstation Scope = "workstation" // locally, no host is touched
	ThroughAPI    Scope = "api"         // through the Kubernetes API (client-go)
)

// Task is one named step of a command.
type Task struct {
	Name        string
	Description string
	Scope       Scope
	Hosts       []string // the hosts a task touches, when Scope is OnHosts
}

// list builds a command's steps: each add is one line of the story.
type list []Step

func (l *list) add(name string, scope Scope, hosts []string, run func(context.Context, progress.Reporter) error, format string, args ...any) {
	*l = append(*l, Step{Task: Task{Name: name, Description: fmt.Sprintf(format, args...), Scope: scope, Hosts: hosts}, Run: run})
}

// Tasks are the tasks of steps, for plan.
func Tasks(steps []Step) []Task {
	out := make([]Task, len(steps))
	for i, s := range steps {
		out[i] = s.Task
	}
	return out
}

// count is "1 what" or "n whats".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// listed is xs for a person: "a", "a and b", "a, b and c".
func listed(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}
