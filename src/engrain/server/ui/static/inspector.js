// engrain inspector: progressive enhancement only. Every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Forms marked data-confirm ask here and send confirmed=yes; without JavaScript the
  // server answers them with a confirmation page instead.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        return;
      }
      const confirmed = document.createElement("input");
      confirmed.type = "hidden";
      confirmed.name = "confirmed";
      confirmed.value = "yes";
      form.appendChild(confirmed);
    });
  }
  // Filter selects and checkboxes apply at once; the Apply button stays for keyboards.
  for (const input of document.querySelectorAll("form[data-autosubmit] select, form[data-autosubmit] input[type=checkbox]")) {
    input.addEventListener("change", () => input.form.requestSubmit());
  }
});
